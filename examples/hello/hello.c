/* The smallest deepinfer host: check that the library it loaded is the one its
 * header describes, print which CPU kernels this machine runs and what an
 * error status means.
 *
 * Build against an installed deepinfer with either
 *   cc hello.c $(pkg-config --cflags --libs deepinfer) -o hello
 * or the CMakeLists.txt beside this file (find_package(deepinfer)). */
#include <deepinfer/deepinfer.h>
#include <stdio.h>

int main(void)
{
    if (di_version() != DI_VERSION_NUMBER) {
        fprintf(stderr, "hello: built against deepinfer %s but loaded %s\n", DI_VERSION_STRING,
                di_version_string());
        return 1;
    }
    printf("deepinfer %s\n", di_version_string());
    printf("CPU kernels: %s\n", di_cpu_kernels()); /* what this machine runs */
    printf("status %d means \"%s\"\n", (int)DI_ERR_INVALID_REQUEST,
           di_status_string(DI_ERR_INVALID_REQUEST));
    return 0;
}
