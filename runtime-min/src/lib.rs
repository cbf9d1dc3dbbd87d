//! runtime-min: the `no_std`, allocation-free ABI shared by every library xla-aot generates.
//!
//! Contract (DESIGN.md): status codes, arena alignment checks and model descriptors. Nothing here
//! allocates, spawns threads or can fail except on a bad argument. The foundation issue only fixes the
//! status codes; the CPU-backend issue adds the arena, descriptors, cbindgen header and C API.
#![no_std]

/// Status returned by every generated entry point. `0` is success; errors are negative so C callers
/// can test `if (status < 0)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The call succeeded.
    Ok = 0,
    /// A required pointer argument was null.
    NullPointer = -1,
    /// The arena pointer is not aligned to the model's `ARENA_ALIGN`.
    MisalignedArena = -2,
    /// A size or count argument is outside what the model was compiled for.
    BadArgument = -3,
}

impl Status {
    /// The C value of this status.
    pub const fn code(self) -> i32 {
        self as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_are_stable() {
        assert_eq!(Status::Ok.code(), 0);
        assert_eq!(Status::NullPointer.code(), -1);
        assert_eq!(Status::MisalignedArena.code(), -2);
        assert_eq!(Status::BadArgument.code(), -3);
    }
}
