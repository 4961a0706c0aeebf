//! Raw LZ4 block encoder giving exactly the bytes of Python's
//! `lz4.block.compress(data)` (python-lz4 4.4.5 over liblz4 1.9.4, default
//! mode) after its 4-byte size prefix.
//!
//! The behaviour follows liblz4 1.9.4's block compressor (BSD-2-Clause,
//! Yann Collet); this is an independent safe-Rust rewrite of its rules.
//!
//! Which liblz4 path matters: python-lz4 does not call the one-shot
//! `LZ4_compress_default`. It resets a fresh `LZ4_stream_t` and calls
//! `LZ4_compress_fast_continue`, which always uses the table of 32-bit
//! positions (4096 entries keyed by a hash of 5 bytes), starting at index 0
//! with no dictionary. The one-shot API would switch to a table of 16-bit
//! positions (8192 entries, 4-byte hash) for inputs below 64 KiB + 11, and
//! its output then differs from Python's.
//!
//! The rules, with `len` the input length:
//! - below 13 bytes the block is one literal run;
//! - a match starts no later than `len - 12` and ends no later than
//!   `len - 5`; it is at least 4 bytes and at most 65 535 bytes back;
//! - the search hashes each probed position and checks the one position
//!   stored under that hash; after every 64 failed probes the stride grows
//!   by one byte;
//! - a found match is extended backwards over equal bytes (not past the
//!   pending literals), then forwards;
//! - after a match the position two bytes before its end is recorded, and
//!   the position at its end is tried at once, with no literals between;
//! - each sequence is a token (literal length : match length − 4, one
//!   nibble each, 15 meaning "more follows" as 255-valued bytes), the
//!   literals, and the match's distance as u16 LE; the block ends with a
//!   token and literals only.

/// Shortest match.
const MIN_MATCH: usize = 4;
/// The block always ends with at least this many literals.
const LAST_LITERALS: usize = 5;
/// No match starts in the last this many bytes.
const MF_LIMIT: usize = 12;
/// Farthest match distance (fits the u16 offset).
const MAX_DISTANCE: usize = 65_535;
/// log2 of the position table's size (liblz4's 16 KiB of u32s).
const HASH_LOG: u32 = 12;
/// The probe stride grows by one after every `1 << SKIP_TRIGGER` misses.
const SKIP_TRIGGER: u32 = 6;
/// liblz4's multiplier for hashing 5 bytes.
const PRIME_5_BYTES: u64 = 889_523_592_379;

/// Appends the raw LZ4 block for `data` to `out` (no size prefix).
pub(super) fn compress_into(data: &[u8], out: &mut Vec<u8>) {
    let len = data.len();
    out.reserve(len + len / 255 + 16);
    let mut anchor = 0; // first byte not yet emitted
    if len > MF_LIMIT {
        // Exclusive bound on a match's start; inclusive on a probe's.
        let start_limit = len - MF_LIMIT + 1;
        let match_limit = len - LAST_LITERALS;
        let mut table = vec![0u32; 1 << HASH_LOG];
        // Positions are stored as u32 like liblz4 (inputs are < 2 GiB);
        // a truncated one could only make a candidate fail its checks.
        table[hash(data, 0)] = 0;
        let mut ip = 1;
        let mut next_hash = hash(data, ip);
        'block: loop {
            // Probe forwards until a position's candidate is a real match.
            let mut next = ip;
            let mut step = 1;
            let mut probes = 1usize << SKIP_TRIGGER;
            let mut candidate = loop {
                let h = next_hash;
                let candidate = table[h] as usize;
                ip = next;
                next += step;
                step = probes >> SKIP_TRIGGER;
                probes += 1;
                if next > start_limit {
                    break 'block;
                }
                next_hash = hash(data, next);
                table[h] = ip as u32;
                if is_match(data, candidate, ip) {
                    break candidate;
                }
            };
            // Extend backwards over equal bytes, then emit the literals.
            while ip > anchor && candidate > 0 && data[ip - 1] == data[candidate - 1] {
                ip -= 1;
                candidate -= 1;
            }
            let mut token = out.len();
            push_literals(out, &data[anchor..ip]);
            loop {
                // The match: offset, then its length beyond the minimum.
                out.extend_from_slice(&((ip - candidate) as u16).to_le_bytes());
                let extra = count(data, ip + MIN_MATCH, candidate + MIN_MATCH, match_limit);
                ip += MIN_MATCH + extra;
                if extra >= 15 {
                    out[token] |= 15;
                    push_length(out, extra - 15);
                } else {
                    out[token] |= extra as u8;
                }
                anchor = ip;
                if ip >= start_limit {
                    break 'block;
                }
                table[hash(data, ip - 2)] = (ip - 2) as u32;
                // Try the match's end right away: a hit is a sequence with
                // no literals.
                let h = hash(data, ip);
                candidate = table[h] as usize;
                table[h] = ip as u32;
                if !is_match(data, candidate, ip) {
                    break;
                }
                token = out.len();
                out.push(0);
            }
            ip += 1;
            next_hash = hash(data, ip);
        }
    }
    push_literals(out, &data[anchor..]);
}

/// Writes a token whose high nibble is the literal run's length (its low
/// nibble is left 0 for the match length), the length's extension bytes
/// and the literals.
fn push_literals(out: &mut Vec<u8>, literals: &[u8]) {
    if literals.len() >= 15 {
        out.push(0xF0);
        push_length(out, literals.len() - 15);
    } else {
        out.push((literals.len() as u8) << 4);
    }
    out.extend_from_slice(literals);
}

/// A length's remainder past a full nibble: 255s, then a byte below 255.
fn push_length(out: &mut Vec<u8>, mut rest: usize) {
    while rest >= 255 {
        out.push(255);
        rest -= 255;
    }
    out.push(rest as u8);
}

/// Whether the earlier position `candidate` is in reach of `ip` and shares
/// its next 4 bytes.
fn is_match(data: &[u8], candidate: usize, ip: usize) -> bool {
    candidate < ip
        && ip - candidate <= MAX_DISTANCE
        && read_le(data, candidate) as u32 == read_le(data, ip) as u32
}

/// The table slot for position `at`: a multiplicative hash of the 5 bytes
/// there (liblz4's 64-bit `LZ4_hash5`).
fn hash(data: &[u8], at: usize) -> usize {
    ((read_le(data, at) << 24).wrapping_mul(PRIME_5_BYTES) >> (64 - HASH_LOG)) as usize
}

/// How many bytes from `a` equal those from `b` (`b < a`), stopping at
/// `limit`.
fn count(data: &[u8], mut a: usize, mut b: usize, limit: usize) -> usize {
    let start = a;
    while a + 8 <= limit {
        let diff = read_le(data, a) ^ read_le(data, b);
        if diff != 0 {
            return a - start + (diff.trailing_zeros() / 8) as usize;
        }
        a += 8;
        b += 8;
    }
    while a < limit && data.get(a) == data.get(b) {
        a += 1;
        b += 1;
    }
    a - start
}

/// The 8 bytes at `at` as a little-endian u64, zero-padded past the end.
fn read_le(data: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    if let Some(rest) = data.get(at..) {
        let n = rest.len().min(8);
        bytes[..n].copy_from_slice(&rest[..n]);
    }
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::compress_into;

    fn compress(data: &[u8]) -> Vec<u8> {
        let mut out = vec![0xAB]; // compress_into appends
        compress_into(data, &mut out);
        assert_eq!(out[0], 0xAB);
        out.split_off(1)
    }

    fn round_trip(data: &[u8]) {
        let block = compress(data);
        assert!(block.len() <= data.len() + data.len() / 255 + 16);
        let back = lz4_flex::block::decompress(&block, data.len()).expect("valid block");
        assert_eq!(back, data, "round trip of {} bytes", data.len());
    }

    /// xorshift64*: deterministic bytes with no dependency.
    fn random(len: usize, mut seed: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                seed ^= seed >> 12;
                seed ^= seed << 25;
                seed ^= seed >> 27;
                (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
            })
            .collect()
    }

    fn sizes() -> Vec<usize> {
        let mut sizes: Vec<usize> = (0..=80).collect();
        sizes.extend([255, 256, 270, 4096, 10_000, 50_000, 65_535, 65_536]);
        sizes.extend(65_540..=65_552);
        sizes.extend([65_536 * 2 + 7, 70_000]);
        sizes
    }

    #[test]
    #[cfg_attr(miri, ignore = "hundreds of KiB compressed: hours under Miri")]
    fn lz4_block_round_trips_random_zero_and_repetitive_data() {
        for (i, &len) in sizes().iter().enumerate() {
            round_trip(&random(len, 0x9E37_79B9_7F4A_7C15 ^ i as u64));
            round_trip(&vec![0u8; len]);
            let text: Vec<u8> = b"abcabd, the quick brown fox; "
                .iter()
                .cycle()
                .take(len)
                .copied()
                .collect();
            round_trip(&text);
            // Low-entropy bytes: many short, overlapping matches.
            let mixed: Vec<u8> = random(len, i as u64 + 1).iter().map(|b| b % 3).collect();
            round_trip(&mixed);
            // Random runs far apart: matches near the 65 535 distance limit.
            let mut far = random(len, 7);
            if len > 66_000 {
                let head = far[..500].to_vec();
                far[65_600..66_100].copy_from_slice(&head);
                far[len - 600..len - 100].copy_from_slice(&head);
            }
            round_trip(&far);
        }
    }

    #[test]
    fn lz4_block_small_inputs_are_one_literal_run() {
        assert_eq!(compress(b""), [0x00]);
        assert_eq!(compress(&[7; 12]), [[0xC0].as_slice(), &[7; 12]].concat());
        // 13 bytes is the first size with a match: 1 literal, then 7 bytes
        // at distance 1, then the 5 last literals.
        assert_eq!(compress(&[7; 13]), [0x13, 7, 1, 0, 0x50, 7, 7, 7, 7, 7]);
    }

    #[test]
    fn lz4_block_matches_python_on_known_inputs() {
        // lz4.block.compress(bytes(50_000)) is 210 bytes with its prefix.
        let zeros = compress(&[0; 50_000]);
        assert_eq!(zeros.len(), 206);
        assert_eq!(&zeros[..4], [0x1F, 0, 1, 0]);
        // lz4.block.compress(b"abcd" * 100)[4:]
        let block = compress(&b"abcd".repeat(100));
        let mut python = vec![0x4F, b'a', b'b', b'c', b'd', 4, 0, 255, 117, 0x50];
        python.extend_from_slice(b"dabcd");
        assert_eq!(block, python);
    }
}
