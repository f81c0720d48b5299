/*
 * true: the tiny static program aim9's exec_test executes.
 *
 * No C library and no start files: the entry point makes the exit_group
 * system call with status 0.  A few hundred bytes, so exec_test measures
 * fork + exec + exit, not the loading of a C library.  Built with
 * -nostdlib (see toolchain.EXTRA_CFLAGS).
 */
#if defined(__x86_64__)
__asm__(".text\n"
	".globl _start\n"
	"_start:\n"
	"	mov $231, %eax\n" /* exit_group */
	"	xor %edi, %edi\n"
	"	syscall\n"
	"	hlt\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl _start\n"
	"_start:\n"
	"	mov x0, #0\n"
	"	mov x8, #94\n" /* exit_group */
	"	svc #0\n"
	"	brk #0\n");
#else
#error "true.c knows x86_64 and arm64"
#endif
