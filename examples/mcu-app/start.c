/*
 * Startup for the emulated Arm MPS boards (and a template for real ones): the vector table, a
 * reset handler that enables the FPU (and Helium on Cortex-M55), copies .data from flash,
 * clears .bss, paints the stack, opens newlib's semihosting I/O and calls main; main's return
 * value ends QEMU through semihosting `exit`. From ../../../shared/toolchain-probe/mcu (tested
 * there).
 *
 * Stack high-water mark: the reset handler fills the top STACK_WINDOW_BYTES of the stack (less
 * what it is using, and never closer than HEAP_RESERVE_BYTES to the end of .bss, where newlib's
 * heap starts) with STACK_PAINT; mcu_stack_high_water() then finds the lowest word that is no
 * longer the paint and returns the bytes from there to the top of the stack: the deepest the
 * stack has been since reset (exact unless a frame happened to store the paint value itself).
 * It returns -1 when the stack reached the bottom of the painted window (a larger window is
 * needed) or there was no room to paint.
 */
#include <stdint.h>
#include <string.h>

extern int main(void);
extern void exit(int);
extern void initialise_monitor_handles(void);
extern uint32_t __etext, __data_start, __data_end, __bss_start__, __bss_end__, __stack_top;

/* The paint: a word unlikely to be stored by real code (not 0, not a small integer, not an
 * address in the boards' memory maps, not a float a model computes on). */
#define STACK_PAINT 0xA5C3A5C3u
/* Most stack measured: the models run in well under 16 KiB of stack (their buffers live in the
 * arena), so 64 KiB leaves room and costs ~50 k instructions at reset. */
#define STACK_WINDOW_BYTES (64u * 1024u)
/* Left unpainted above .bss for newlib's heap (semihosting stdio buffers, fopen), which grows up
 * from `end` and must not be mistaken for stack. */
#define HEAP_RESERVE_BYTES (16u * 1024u)
/* Words just below the reset handler's stack pointer left alone (its own frame and the painting
 * loop's). */
#define PAINT_MARGIN_BYTES 256u

/* The lowest painted word; null when nothing was painted. */
static uint32_t *paint_bottom;

static void paint_stack(void) {
    uint32_t *top = &__stack_top;
    uint32_t *floor = (uint32_t *)((char *)&__bss_end__ + HEAP_RESERVE_BYTES);
    uint32_t *bottom = (uint32_t *)((char *)top - STACK_WINDOW_BYTES);
    if (bottom < floor) bottom = floor;
    uint32_t *sp;
    __asm volatile("mov %0, sp" : "=r"(sp));
    uint32_t *end = (uint32_t *)((char *)sp - PAINT_MARGIN_BYTES);
    if (bottom >= end) return;
    for (volatile uint32_t *p = bottom; p < end; p++) *p = STACK_PAINT;
    paint_bottom = bottom;
}

long mcu_stack_high_water(void) {
    if (!paint_bottom || *paint_bottom != STACK_PAINT) return -1;
    const uint32_t *p = paint_bottom;
    while (p < &__stack_top && *p == STACK_PAINT) p++;
    return (long)((const char *)&__stack_top - (const char *)p);
}

void Reset_Handler(void) {
    /* CPACR: full access to CP10/CP11 (the FPU; also MVE on Armv8.1-M). */
    *(volatile uint32_t *)0xE000ED88 |= (0xFu << 20);
    __asm volatile("dsb\n isb");
    memcpy(&__data_start, &__etext, (char *)&__data_end - (char *)&__data_start);
    memset(&__bss_start__, 0, (char *)&__bss_end__ - (char *)&__bss_start__);
    paint_stack();
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
