//! Where large receives land: this process's anonymous mappings (shared by
//! `tests/common` and `tests/zero_copy.rs`, which has its own allocator).
#![allow(dead_code)]

/// The address ranges of this process's anonymous mappings, from
/// `/proc/self/maps` (lines with no path): where a connection receives a
/// large run of frames (a mapping of the run's length, which the counting
/// allocator does not see).
pub fn anonymous_mappings() -> Vec<std::ops::Range<usize>> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .filter(|line| line.split_whitespace().nth(5).is_none())
        .filter_map(|line| {
            let (start, end) = line.split_whitespace().next()?.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            Some(start..usize::from_str_radix(end, 16).ok()?)
        })
        .collect()
}

/// Whether all of `bytes` lies in one anonymous mapping made since
/// `before` was taken.
pub fn in_new_mapping(bytes: &[u8], before: &[std::ops::Range<usize>]) -> bool {
    let (start, end) = (
        bytes.as_ptr() as usize,
        bytes.as_ptr() as usize + bytes.len(),
    );
    anonymous_mappings()
        .iter()
        .filter(|m| !before.contains(m))
        .any(|m| m.start <= start && end <= m.end)
}
