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

/// Reads the whole file at `path`, refusing first what cannot be read whole: anything that is
/// not a regular file (a device such as `/dev/zero`, a pipe, a socket) and a file larger than
/// `limit` bytes (`what` names the limit in the message, e.g. `MAX_TEXT_FILE_BYTES`). Errors are
/// `std::io::Error`s whose message says what to do, so [`io_reason`] renders them.
pub fn read_bounded(path: &std::path::Path, limit: u64, what: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "it is a directory",
        ));
    }
    if !meta.is_file() {
        return Err(std::io::Error::other(
            "it is not a regular file (a device, pipe or socket has no size to check; copy the data to a file)",
        ));
    }
    if meta.len() > limit {
        return Err(too_large(meta.len(), limit, what));
    }
    // The file may grow between the check and the read: read at most one byte past the limit.
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(meta.len() as usize)
        .map_err(|_| std::io::Error::other(format!("{} bytes do not fit in memory", meta.len())))?;
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64, limit, what));
    }
    Ok(bytes)
}

/// [`read_bounded`] for text: invalid UTF-8 is an `InvalidData` error.
pub fn read_bounded_string(
    path: &std::path::Path,
    limit: u64,
    what: &str,
) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, limit, what)?).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

fn too_large(size: u64, limit: u64, what: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "it is {size} bytes, more than the {limit}-byte limit ({what}; see docs/limits.md)"
    ))
}
