//! Static libraries (`lib<name>.a`) written in Rust: the System V / GNU `ar` format with a symbol
//! index, so `ld` needs no `ranlib`.
//!
//! Contract: [`write_archive`] is deterministic (zero timestamps, uid, gid; mode 644): the same
//! members give the same bytes. [`write_archive_with`] appends a last member written in place
//! (the weights' data object, `data_object.rs`): its size is known up front, so the archive is
//! allocated once at its final size and the member is never held twice.

/// One archive member.
pub struct Member<'a> {
    /// File name (at most 15 bytes, stored as `name/`).
    pub name: &'a str,
    /// Contents.
    pub data: &'a [u8],
    /// Global symbols this member defines (for the index).
    pub symbols: Vec<String>,
}

fn header(name: &str, size: usize) -> Vec<u8> {
    let mut h = format!(
        "{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
        0, 0, 0, 644, size
    )
    .into_bytes();
    debug_assert_eq!(h.len(), 60);
    h.truncate(60);
    h
}

/// Appends a member's bytes to the archive being built.
pub type WriteMember<'a> = Box<dyn FnOnce(&mut Vec<u8>) + 'a>;

/// A last member written into the archive by `write`, which appends exactly `len` bytes.
pub struct Tail<'a> {
    /// File name (at most 15 bytes).
    pub name: &'a str,
    /// Its size.
    pub len: usize,
    /// Global symbols it defines.
    pub symbols: Vec<String>,
    /// Appends the member's bytes.
    pub write: WriteMember<'a>,
}

/// Builds an archive from members, with a GNU symbol index first.
pub fn write_archive(members: &[Member]) -> Vec<u8> {
    write_archive_with(members, None).0
}

/// [`write_archive`] with a `tail` member last; also returns where the tail's bytes are.
pub fn write_archive_with(
    members: &[Member],
    tail: Option<Tail>,
) -> (Vec<u8>, Option<std::ops::Range<usize>>) {
    let tail_syms = tail.as_ref().map(|t| t.symbols.as_slice()).unwrap_or(&[]);
    let all_syms = || {
        members
            .iter()
            .flat_map(|m| m.symbols.iter())
            .chain(tail_syms.iter())
    };
    let nsyms: usize = all_syms().count();
    let names_len: usize = all_syms().map(|s| s.len() + 1).sum();
    let index_size = 4 + 4 * nsyms + names_len;
    let padded = |n: usize| n + n % 2;
    // Offsets of member headers.
    let mut offsets = Vec::new();
    let mut pos = 8 + 60 + padded(index_size);
    for m in members {
        offsets.push(pos);
        pos += 60 + padded(m.data.len());
    }
    let tail_at = pos;
    if let Some(t) = &tail {
        pos += 60 + padded(t.len);
    }
    let mut out = Vec::with_capacity(pos);
    out.extend(b"!<arch>\n");
    out.extend(header("/", index_size));
    out.extend((nsyms as u32).to_be_bytes());
    for (m, &off) in members.iter().zip(&offsets) {
        for _ in &m.symbols {
            out.extend((off as u32).to_be_bytes());
        }
    }
    for _ in tail_syms {
        out.extend((tail_at as u32).to_be_bytes());
    }
    for s in all_syms() {
        out.extend(s.as_bytes());
        out.push(0);
    }
    if index_size % 2 == 1 {
        out.push(b'\n');
    }
    for m in members {
        out.extend(header(&format!("{}/", m.name), m.data.len()));
        out.extend(m.data);
        if m.data.len() % 2 == 1 {
            out.push(b'\n');
        }
    }
    let range = tail.map(|t| {
        out.extend(header(&format!("{}/", t.name), t.len));
        let start = out.len();
        (t.write)(&mut out);
        assert_eq!(out.len() - start, t.len, "archive tail member size");
        if t.len % 2 == 1 {
            out.push(b'\n');
        }
        start..start + t.len
    });
    debug_assert_eq!(out.len(), pos);
    (out, range)
}
