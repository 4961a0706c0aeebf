//! CRC32 checksums: a framewire extension two peers agree on in the
//! handshake (SPEC.md §6.2). Python peers never offer it, and never see it.
//!
//! ```text
//! prelude: N | count = n + 1 | len 0 … len n-1 | 4 × (n + 1)
//! frames:  frame 0 … frame n-1 | trailer
//! trailer: crc(frame 0) … crc(frame n-1) | crc(len 0 … len n-1 as u64 LE)   (u32 LE each)
//! ```
//!
//! The trailer is one extra final frame that no placeholder references, so
//! a reader that knows nothing of it (Python's) decodes the message and
//! ignores it, as it ignores any orphan frame. CRCs cover the frames' wire
//! bytes (compressed, if they are), so they are checked before anything is
//! decompressed or decoded. Both sides compute them as the bytes pass
//! through the socket, while the bytes are still in cache: the sender after
//! each write, the receiver after each read.

use bytes::Bytes;

/// With checksums on, large frames are written and read in pieces of at
/// most this many bytes, summed right after each system call while they
/// are still in the CPU's cache.
pub(crate) const PIECE: usize = 1 << 20;

/// The handshake extension: `"framewire-checksum": "crc32"`.
pub(crate) const EXTENSION: &str = "checksum";
/// The only algorithm defined.
pub(crate) const ALGORITHM: &str = "crc32";

/// Bytes of the trailer of a message of `count` frames (trailer included).
pub(crate) fn trailer_len(count: usize) -> usize {
    4 * count
}

/// The CRC32 of a length table: each length as a little-endian `u64`.
pub(crate) fn lengths_crc(lengths: impl IntoIterator<Item = u64>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for len in lengths {
        h.update(&len.to_le_bytes());
    }
    h.finalize()
}

/// The trailer for frames with these CRCs and lengths.
pub(crate) fn trailer(sums: &[u32], lengths: impl IntoIterator<Item = u64>) -> Bytes {
    let mut out = Vec::with_capacity(trailer_len(sums.len() + 1));
    for s in sums {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.extend_from_slice(&lengths_crc(lengths).to_le_bytes());
    Bytes::from(out)
}

/// The CRC32s of a message's frames, fed its frame bytes in order, in
/// pieces of any size, as they arrive or leave.
#[derive(Debug, Default)]
pub(crate) struct Running {
    sums: Vec<u32>,
    current: crc32fast::Hasher,
    /// Bytes still to come of the frame `sums.len()`.
    left: usize,
}

impl Running {
    pub(crate) fn new(lengths: &[usize]) -> Running {
        let mut r = Running {
            sums: Vec::with_capacity(lengths.len()),
            current: crc32fast::Hasher::new(),
            left: lengths.first().copied().unwrap_or(0),
        };
        r.close_finished(lengths);
        r
    }

    /// Adds the next bytes of the message's frames (their concatenation).
    pub(crate) fn feed(&mut self, lengths: &[usize], mut data: &[u8]) {
        while !data.is_empty() && self.sums.len() < lengths.len() {
            let n = data.len().min(self.left);
            self.current.update(&data[..n]);
            self.left -= n;
            data = &data[n..];
            self.close_finished(lengths);
        }
        debug_assert!(data.is_empty(), "more bytes than the frames hold");
    }

    /// Finishes every frame with no bytes left (empty frames included).
    fn close_finished(&mut self, lengths: &[usize]) {
        while self.left == 0 && self.sums.len() < lengths.len() {
            self.sums.push(std::mem::take(&mut self.current).finalize());
            self.left = lengths.get(self.sums.len()).copied().unwrap_or(0);
        }
    }

    /// The CRCs, once every frame was fed.
    pub(crate) fn sums(&self) -> &[u32] {
        &self.sums
    }
}

/// A message whose checksum trailer does not match what arrived (SPEC.md
/// §6.2): bytes changed on the way. Checked before anything is decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChecksumError {
    /// A frame's CRC32 differs from the one in the checksum trailer.
    Mismatch {
        /// Index of the frame.
        frame: usize,
        /// The CRC32 the sender computed.
        expected: u32,
        /// The CRC32 of the bytes received.
        actual: u32,
    },
    /// The CRC32 of the length table differs from the trailer's: a length
    /// changed on the way (the frames may be cut in the wrong places).
    PreludeMismatch {
        /// The CRC32 the sender computed.
        expected: u32,
        /// The CRC32 of the lengths received.
        actual: u32,
    },
    /// Checksums were agreed, but the last frame is not a trailer of
    /// `4 × count` bytes, or there is no frame before it.
    TrailerInvalid {
        /// The last frame's length.
        len: u64,
        /// `4 × count`.
        expected: u64,
    },
}

impl std::fmt::Display for ChecksumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChecksumError::Mismatch {
                frame,
                expected,
                actual,
            } => write!(
                f,
                "frame {frame} fails its checksum: CRC32 {actual:#010x}, the sender's {expected:#010x}"
            ),
            ChecksumError::PreludeMismatch { expected, actual } => write!(
                f,
                "the length table fails its checksum: CRC32 {actual:#010x}, the sender's {expected:#010x}"
            ),
            ChecksumError::TrailerInvalid { len, expected } => write!(
                f,
                "checksums were agreed but the last frame is {len} bytes, not a {expected}-byte trailer"
            ),
        }
    }
}

impl std::error::Error for ChecksumError {}

/// Checks a received message against its trailer (the last frame) and
/// removes the trailer. `sums` are the CRCs of every frame, trailer
/// included, as received. The length table is checked first: after a
/// changed length, the frames are cut in the wrong places.
pub(crate) fn verify(frames: &mut Vec<Bytes>, sums: &[u32]) -> Result<(), ChecksumError> {
    let count = frames.len();
    let expected = trailer_len(count);
    let invalid = |len: usize| ChecksumError::TrailerInvalid {
        len: len as u64,
        expected: expected as u64,
    };
    let trailer = frames.pop().ok_or(invalid(0))?;
    if trailer.len() != expected {
        return Err(ChecksumError::TrailerInvalid {
            len: trailer.len() as u64,
            expected: expected as u64,
        });
    }
    let stored = |i: usize| {
        let mut b = [0; 4];
        b.copy_from_slice(&trailer[4 * i..4 * i + 4]);
        u32::from_le_bytes(b)
    };
    let n = count - 1;
    let actual = lengths_crc(frames.iter().map(|f| f.len() as u64));
    if actual != stored(n) {
        return Err(ChecksumError::PreludeMismatch {
            expected: stored(n),
            actual,
        });
    }
    debug_assert_eq!(sums.len(), count);
    for (frame, &actual) in sums[..n].iter().enumerate() {
        if actual != stored(frame) {
            return Err(ChecksumError::Mismatch {
                frame,
                expected: stored(frame),
                actual,
            });
        }
    }
    if frames.is_empty() {
        // A trailer alone: no message around it.
        return Err(invalid(trailer.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_sums_equal_one_shot_sums_whatever_the_pieces() {
        let frames: Vec<Vec<u8>> = vec![vec![1; 5], vec![], vec![2; 70], vec![], vec![3; 1]];
        let lengths: Vec<usize> = frames.iter().map(Vec::len).collect();
        let body: Vec<u8> = frames.concat();
        let want: Vec<u32> = frames.iter().map(|f| crc32fast::hash(f)).collect();
        for piece in 1..=body.len() {
            let mut r = Running::new(&lengths);
            for chunk in body.chunks(piece) {
                r.feed(&lengths, chunk);
            }
            assert_eq!(r.sums(), &want[..], "pieces of {piece}");
        }
    }

    #[test]
    fn verify_strips_a_good_trailer_and_names_the_bad_frame() {
        let data = [Bytes::from_static(b"\x80"), Bytes::from_static(b"payload")];
        let sums: Vec<u32> = data.iter().map(|f| crc32fast::hash(f)).collect();
        let t = trailer(&sums, data.iter().map(|f| f.len() as u64));
        let mut all_sums = sums.clone();
        all_sums.push(crc32fast::hash(&t));

        let mut frames = vec![data[0].clone(), data[1].clone(), t.clone()];
        verify(&mut frames, &all_sums).unwrap();
        assert_eq!(frames, data);

        let mut bad = all_sums.clone();
        bad[1] ^= 1;
        let mut frames = vec![data[0].clone(), data[1].clone(), t.clone()];
        assert_eq!(
            verify(&mut frames, &bad),
            Err(ChecksumError::Mismatch {
                frame: 1,
                expected: sums[1],
                actual: sums[1] ^ 1
            })
        );
        let mut short = vec![data[0].clone(), t.slice(..4)];
        assert_eq!(
            verify(&mut short, &all_sums[..2]),
            Err(ChecksumError::TrailerInvalid {
                len: 4,
                expected: 8
            })
        );
        // The table of `[data[0], data[1]]` does not match lengths `[1, 8]`.
        let mut moved = vec![data[0].clone(), Bytes::from_static(b"payload!"), t];
        assert!(matches!(
            verify(&mut moved, &all_sums),
            Err(ChecksumError::PreludeMismatch { .. })
        ));
    }
}
