//! Runs mlp and the DS-CNN, compiled by `build.rs` for the Cargo target, through their safe
//! bindings (`runtime_min::include_model!`) on a bare Cortex-M: no std, no allocator, no runtime
//! crate. The vector table, reset handler and semihosting output are the few lines below.
//!
//!     cd examples/mcu-rust && cargo run --target thumbv7em-none-eabihf   # QEMU mps2-an386 (.cargo/config.toml)
//!
//! Inputs follow `examples/mcu-app/main.c` (element k of input i is ((7k + 13i) mod 17 − 8) / 8);
//! each output prints as `<model> out0: <f32 bits in hex>...`, then `done`. Built for the host,
//! it only says how to build it.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

runtime_min::include_model!("mlp");
runtime_min::include_model!("ds_cnn");

/// The model inputs of `examples/mcu-app/main.c` (input 0).
#[cfg_attr(not(target_os = "none"), allow(dead_code))]
fn fill(x: &mut [f32]) {
    for (k, v) in x.iter_mut().enumerate() {
        *v = (((k * 7) % 17) as f32 - 8.0) / 8.0;
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    println!(
        "mcu-rust is a bare-metal program: cd examples/mcu-rust && cargo run --target thumbv7em-none-eabihf"
    );
}

#[cfg(target_os = "none")]
mod bare {
    use super::{ds_cnn, fill, mlp};
    use core::fmt::Write;

    /// Semihosting: operation `op` with parameter `arg` (QEMU's `-semihosting`).
    fn semihost(op: u32, arg: usize) -> u32 {
        let r: u32;
        // SAFETY: `bkpt 0xab` is the semihosting call; r0 and r1 are its operands.
        unsafe { core::arch::asm!("bkpt 0xab", inout("r0") op => r, in("r1") arg) };
        r
    }

    /// The host's standard output: semihosting `SYS_OPEN` of `:tt` for writing (QEMU sends
    /// `SYS_WRITEC` output to its stderr instead).
    struct Console(u32);

    impl Console {
        fn open() -> Console {
            let name = b":tt\0";
            let block = [name.as_ptr() as usize, 4, 3]; // mode 4: "w"; length of ":tt"
            Console(semihost(0x01, block.as_ptr() as usize))
        }
    }

    impl Write for Console {
        /// Semihosting `SYS_WRITE` of the whole string.
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let block = [self.0 as usize, s.as_ptr() as usize, s.len()];
            match semihost(0x05, block.as_ptr() as usize) {
                0 => Ok(()),
                _ => Err(core::fmt::Error),
            }
        }
    }

    /// Ends the program: semihosting `SYS_EXIT` (`ADP_Stopped_ApplicationExit`, exit status 0)
    /// or `SYS_EXIT_EXTENDED` with `code`.
    fn exit(code: u32) -> ! {
        if code == 0 {
            semihost(0x18, 0x20026);
        } else {
            let block = [0x20026u32, code];
            semihost(0x20, block.as_ptr() as usize);
        }
        // Without a debugger or QEMU the call returns: wait for interrupts forever.
        loop {
            cortex_wfi();
        }
    }

    /// Waits for an interrupt (`wfi`).
    fn cortex_wfi() {
        // SAFETY: `wfi` only suspends the core until an interrupt.
        unsafe { core::arch::asm!("wfi") };
    }

    fn print(con: &mut Console, name: &str, out: &[f32]) {
        let _ = write!(con, "{name} out0:");
        for v in out {
            let _ = write!(con, " {:08x}", v.to_bits());
        }
        let _ = writeln!(con);
    }

    // Arenas, inputs and outputs in SRAM (.bss); sizes from the bindings.
    static mut MLP_ARENA: mlp::Arena<{ mlp::ARENA_SIZE }> = mlp::Arena::new();
    static mut DS_ARENA: ds_cnn::Arena<{ ds_cnn::ARENA_SIZE }> = ds_cnn::Arena::new();
    static mut MLP_X: [f32; mlp::X_LEN] = [0.0; mlp::X_LEN];
    static mut MLP_Y: [f32; mlp::PROBS_LEN] = [0.0; mlp::PROBS_LEN];
    static mut DS_X: [f32; ds_cnn::MFCC_LEN] = [0.0; ds_cnn::MFCC_LEN];
    static mut DS_Y: [f32; ds_cnn::PROBS_LEN] = [0.0; ds_cnn::PROBS_LEN];

    fn main() -> u32 {
        // SAFETY: one thread, no interrupts: these statics are only used here.
        let (ma, mx, my, da, dx, dy) = unsafe {
            (
                &mut *core::ptr::addr_of_mut!(MLP_ARENA),
                &mut *core::ptr::addr_of_mut!(MLP_X),
                &mut *core::ptr::addr_of_mut!(MLP_Y),
                &mut *core::ptr::addr_of_mut!(DS_ARENA),
                &mut *core::ptr::addr_of_mut!(DS_X),
                &mut *core::ptr::addr_of_mut!(DS_Y),
            )
        };
        let mut con = Console::open();
        fill(mx);
        fill(dx);
        if mlp::run(ma, mx, my).is_err() || ds_cnn::run(da, dx, dy).is_err() {
            let _ = writeln!(con, "a model failed");
            return 2;
        }
        print(&mut con, "mlp", my);
        print(&mut con, "ds_cnn", dy);
        let _ = writeln!(con, "done");
        0
    }

    unsafe extern "C" {
        static mut __etext: u32;
        static mut __data_start: u32;
        static mut __data_end: u32;
        static mut __bss_start__: u32;
        static mut __bss_end__: u32;
        static __stack_top: u32;
    }

    /// Reset: enable the FPU (CPACR CP10/CP11), copy .data from flash, clear .bss, run.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn Reset_Handler() -> ! {
        // SAFETY: the linker script's symbols bound .data and .bss; nothing has run yet.
        unsafe {
            core::ptr::write_volatile(
                0xE000_ED88 as *mut u32,
                core::ptr::read_volatile(0xE000_ED88 as *const u32) | (0xF << 20),
            );
            core::arch::asm!("dsb", "isb");
            let mut src = core::ptr::addr_of!(__etext);
            let mut dst = core::ptr::addr_of_mut!(__data_start);
            while dst < core::ptr::addr_of_mut!(__data_end) {
                dst.write_volatile(src.read());
                dst = dst.add(1);
                src = src.add(1);
            }
            let mut p = core::ptr::addr_of_mut!(__bss_start__);
            while p < core::ptr::addr_of_mut!(__bss_end__) {
                p.write_volatile(0);
                p = p.add(1);
            }
        }
        exit(main())
    }

    unsafe extern "C" fn default_handler() {
        loop {
            cortex_wfi();
        }
    }

    /// One entry of the vector table.
    #[derive(Clone, Copy)]
    pub union Vector {
        stack: *const u32,
        handler: unsafe extern "C" fn(),
        reset: unsafe extern "C" fn() -> !,
    }

    /// The vector table: the initial stack pointer, reset, and the fault handlers.
    #[repr(C)]
    pub struct Vectors([Vector; 7]);

    // SAFETY: read-only addresses.
    unsafe impl Sync for Vectors {}

    #[unsafe(link_section = ".vectors")]
    #[used]
    pub static VECTORS: Vectors = Vectors([
        Vector {
            stack: core::ptr::addr_of!(__stack_top),
        },
        Vector {
            reset: Reset_Handler,
        },
        Vector {
            handler: default_handler,
        },
        Vector {
            handler: default_handler,
        },
        Vector {
            handler: default_handler,
        },
        Vector {
            handler: default_handler,
        },
        Vector {
            handler: default_handler,
        },
    ]);

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo) -> ! {
        let _ = writeln!(Console::open(), "panic");
        exit(101)
    }
}
