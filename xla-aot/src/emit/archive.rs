//! Static libraries (`lib<name>.a`) written in Rust: the System V / GNU `ar` format with a symbol
//! index, so `ld` needs no `ranlib`.
//!
//! Contract: [`write_archive`] is deterministic (zero timestamps, uid, gid; mode 644): the same
//! members give the same bytes.

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

/// Builds an archive from members, with a GNU symbol index first.
pub fn write_archive(members: &[Member]) -> Vec<u8> {
    let nsyms: usize = members.iter().map(|m| m.symbols.len()).sum();
    let names_len: usize = members
        .iter()
        .flat_map(|m| m.symbols.iter())
        .map(|s| s.len() + 1)
        .sum();
    let index_size = 4 + 4 * nsyms + names_len;
    let padded = |n: usize| n + n % 2;
    // Offsets of member headers.
    let mut offsets = Vec::new();
    let mut pos = 8 + 60 + padded(index_size);
    for m in members {
        offsets.push(pos);
        pos += 60 + padded(m.data.len());
    }
    let mut out = b"!<arch>\n".to_vec();
    out.extend(header("/", index_size));
    out.extend((nsyms as u32).to_be_bytes());
    for (m, &off) in members.iter().zip(&offsets) {
        for _ in &m.symbols {
            out.extend((off as u32).to_be_bytes());
        }
    }
    for m in members {
        for s in &m.symbols {
            out.extend(s.as_bytes());
            out.push(0);
        }
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
    out
}
