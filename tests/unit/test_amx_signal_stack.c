/* AMX's process-wide side effect stays where it is needed. Linux grants the
 * AMX tile state to a whole process (arch_prctl ARCH_REQ_XCOMP_PERM), and from
 * then on every signal frame is about 12 KiB, so an alternate signal stack of
 * glibc's SIGSTKSZ (8 KiB) can no longer be installed. The library asks only
 * at the first prefill AMX would run, never at load or at a decode-sized
 * step; and when the host already has a small signal stack installed, Linux
 * refuses and the products run on VNNI/AVX2 instead, with the host's stack
 * untouched. (A breaker's reproducer: a host installing 8 KiB stacks after
 * loading a model failed with ENOMEM.) On a machine without AMX every case
 * holds trivially; the output says which. */
#define _DEFAULT_SOURCE /* sigaltstack, stack_t */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

enum { SMALL_STACK = 8192 };

static const char *model_path(void)
{
    return DI_FIXTURE_DIR "/model/gguf-tiny/qwen2-q8_0.gguf";
}

static char small_stack[SMALL_STACK];

/* Install (or with disable, remove) an 8 KiB alternate signal stack on this
 * thread; 0 or -1 as sigaltstack. */
static int install_small_stack(int disable)
{
    stack_t ss = {
        .ss_sp = small_stack, .ss_size = SMALL_STACK, .ss_flags = disable ? SS_DISABLE : 0};
    return sigaltstack(&ss, NULL);
}

static int amx_listed(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strncmp(line, "flags", 5) == 0 && strstr(line, " amx_int8") != NULL;
    if (f) fclose(f);
    return found;
}

static di_model *load(void)
{
    di_model *m = NULL;
    di_error *e = NULL;
    if (di_model_load(model_path(), NULL, &m, &e) != DI_OK)
        fail_msg("load %s: %s", model_path(), di_error_message(e));
    return m;
}

/* Load, a decode-sized step, free: a small stack can still be installed. */
static void test_load_and_decode_leave_signal_stacks_alone(void **state)
{
    (void)state;
    di_model *m = load();
    int32_t tokens[4] = {1, 2, 3, 4};
    di_error *e = NULL;
    assert_int_equal(di_model_eval(m, tokens, 4, NULL, 0, &e), DI_OK);
    di_model_free(m);
    assert_int_equal(install_small_stack(0), 0);
    assert_int_equal(install_small_stack(1), 0);
    /* nothing asked: di_cpu_kernels names AMX with its note, or no AMX */
    const char *k = di_cpu_kernels();
    /* docs/api.md's words for off: 0, off, false, no, any case, blanks around */
    const char *env = getenv("DI_CPU_AMX");
    char word[8] = "", extra;
    if (!env || sscanf(env, " %7s %c", word, &extra) != 1) word[0] = '\0';
    const int off = strcasecmp(word, "0") == 0 || strcasecmp(word, "off") == 0 ||
                    strcasecmp(word, "false") == 0 || strcasecmp(word, "no") == 0;
    if (amx_listed() && !off)
        assert_non_null(strstr(k, "asked of Linux at the first product"));
    else
        assert_null(strstr(k, "amx"));
}

/* A prefill while the host has a small stack installed: it runs (Linux
 * refuses the tile state, the products take VNNI/AVX2) and the host's stack
 * stays usable. */
static void test_prefill_under_a_small_signal_stack(void **state)
{
    (void)state;
    assert_int_equal(install_small_stack(0), 0);
    di_model *m = load();
    int32_t tokens[40];
    for (int i = 0; i < 40; i++) tokens[i] = 1 + (i * 37) % 200;
    di_error *e = NULL;
    assert_int_equal(di_model_eval(m, tokens, 40, NULL, 0, &e), DI_OK);
    di_model_free(m);
    stack_t now;
    assert_int_equal(sigaltstack(NULL, &now), 0);
    assert_ptr_equal(now.ss_sp, small_stack);
    assert_int_equal(install_small_stack(1), 0);
    assert_int_equal(install_small_stack(0), 0); /* still installable */
    assert_int_equal(install_small_stack(1), 0);
    /* refused: di_cpu_kernels no longer names AMX */
    assert_null(strstr(di_cpu_kernels(), "amx"));
    printf("amx signal stacks: %s\n",
           amx_listed() ? "this CPU has amx-int8: load and decode asked for nothing, and a prefill "
                          "under an 8 KiB signal stack ran without it"
                        : "no amx-int8 on this CPU: nothing to ask for");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_decode_leave_signal_stacks_alone),
        cmocka_unit_test(test_prefill_under_a_small_signal_stack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
