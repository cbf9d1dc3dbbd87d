/*
 * Startup for the emulated Arm MPS boards (and a template for real ones): the vector table, a
 * reset handler that enables the FPU (and Helium on Cortex-M55), copies .data from flash,
 * clears .bss, opens newlib's semihosting I/O and calls main; main's return value ends QEMU
 * through semihosting `exit`. From ../../../shared/toolchain-probe/mcu (tested there).
 */
#include <stdint.h>
#include <string.h>

extern int main(void);
extern void exit(int);
extern void initialise_monitor_handles(void);
extern uint32_t __etext, __data_start, __data_end, __bss_start__, __bss_end__, __stack_top;

void Reset_Handler(void) {
    /* CPACR: full access to CP10/CP11 (the FPU; also MVE on Armv8.1-M). */
    *(volatile uint32_t *)0xE000ED88 |= (0xFu << 20);
    __asm volatile("dsb\n isb");
    memcpy(&__data_start, &__etext, (char *)&__data_end - (char *)&__data_start);
    memset(&__bss_start__, 0, (char *)&__bss_end__ - (char *)&__bss_start__);
    initialise_monitor_handles();
    exit(main());
}

void Default_Handler(void) {
    for (;;) {
    }
}

__attribute__((section(".vectors"), used)) const void *vectors[16] = {
    &__stack_top,    Reset_Handler,   Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler,
};

/* newlib's init/fini hooks; nothing to run. */
void _init(void) {}
void _fini(void) {}
