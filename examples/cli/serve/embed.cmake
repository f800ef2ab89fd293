# Turns the chat page (chat.html) into page.c, a C array the server serves at /:
#   cmake -DIN=chat.html -DOUT=page.c -P embed.cmake
file(READ "${IN}" _hex HEX)
string(LENGTH "${_hex}" _n)
math(EXPR _bytes "${_n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _arr "${_hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " _arr "${_arr}")
file(WRITE "${OUT}" "/* Generated from examples/cli/serve/chat.html by embed.cmake: do not edit. */\n"
  "#include <stddef.h>\n\n"
  "extern const char srv_page_html[];\nextern const size_t srv_page_html_len;\n\n"
  "const char srv_page_html[] = {\n    ${_arr}0x00};\n"
  "const size_t srv_page_html_len = ${_bytes};\n")
