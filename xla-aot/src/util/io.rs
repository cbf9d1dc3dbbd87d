//! I/O error wording shared by every stage that reads or writes user files.
//!
//! Contract: [`io_reason`] is short and stable across platforms (no OS error number), so that
//! messages can be pasted into tests.

/// A short, stable description of an I/O error (without the OS error number).
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::IsADirectory => "it is a directory".into(),
        _ => e.to_string(),
    }
}
