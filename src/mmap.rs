//! Memory-mapped frames (Linux): payloads that live in a file mapping
//! instead of the heap, as ordinary [`Bytes`] (`Bytes::from_owner`), so they
//! go through [`Envelope`](crate::Envelope), `dumps` and the
//! `transport::Connection`'s vectored writes like any
//! other frame, without being read into memory.
//!
//! **This is framewire's only module with `unsafe` code**: two calls that
//! map a file (`memmap2`'s `map` / `map_mut`). A mapping is only sound while
//! nobody truncates or rewrites the file under it; a truncated file turns
//! the next access into `SIGBUS`, which no `Result` can catch. So
//! framewire maps only files it can prove nobody else can change:
//!
//! * [`sealed`]: a memfd whose seals forbid shrinking, growing and writing
//!   (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE`, checked with
//!   `F_GET_SEALS` before mapping). The kernel refuses any change, from
//!   any process. [`sealed_copy`] makes one from a region of any file with a
//!   kernel-side copy (`copy_file_range`/`sendfile`, never a read into a
//!   buffer): the payload never passes through this process's memory.
//! * [`SpillBuffer`]: an anonymous (unlinked, `O_TMPFILE`, mode 0600)
//!   temporary file that only this process holds open, with its blocks
//!   allocated up front (`fallocate`), so a full disk is an error at
//!   creation, never a `SIGBUS` on a write. The transport receives large
//!   frames into one when `transport::ConnectionBuilder::spill`
//!   is set.
//!
//! Any other file (a user's file that another process may truncate) is
//! never mapped: [`sealed`] refuses it with [`MmapError::NotSealed`];
//! [`sealed_copy`] copies it into a sealed memfd first.
//!
//! ```
//! use std::io::Write;
//! use framewire::mmap;
//!
//! let mut file = tempfile::tempfile()?;
//! file.write_all(&vec![42u8; 1 << 20])?;
//! // 1 MiB from offset 4096, copied by the kernel into a sealed memfd, mapped.
//! let frame = mmap::sealed_copy(&file, 4096, (1 << 20) - 4096)?;
//! assert_eq!(frame.len(), (1 << 20) - 4096);
//! assert!(frame.iter().all(|&b| b == 42));
//! // Past the end of the file: an error, not a short mapping.
//! assert!(matches!(
//!     mmap::sealed_copy(&file, 1 << 20, 1),
//!     Err(mmap::MmapError::OutOfRange { .. })
//! ));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;

use bytes::Bytes;
use memmap2::{Mmap, MmapMut, MmapOptions};
use rustix::fs::{FallocateFlags, MemfdFlags, SealFlags};

/// The seals that make a memfd safe to map: no shrinking, growing or writing.
const SAFE_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::WRITE);

/// What can go wrong mapping a frame.
#[derive(Debug)]
#[non_exhaustive]
pub enum MmapError {
    /// `offset + len` is past the end of the file (M3).
    OutOfRange {
        /// The requested offset.
        offset: u64,
        /// The requested length.
        len: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The file is not a memfd sealed against shrinking, growing and
    /// writing, so mapping it could end in `SIGBUS` (M1). Use
    /// [`sealed_copy`].
    NotSealed,
    /// The operating system refused (creating, sizing, copying, sealing or
    /// mapping).
    Io(io::Error),
}

impl fmt::Display for MmapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MmapError::OutOfRange {
                offset,
                len,
                file_len,
            } => write!(
                f,
                "bytes {offset}..{offset}+{len} are past the end of a {file_len}-byte file"
            ),
            MmapError::NotSealed => f.write_str(
                "the file is not a sealed memfd (shrink, grow and write seals): mapping it is unsafe",
            ),
            MmapError::Io(e) => write!(f, "mapping a file: {e}"),
        }
    }
}

impl std::error::Error for MmapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MmapError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for MmapError {
    fn from(e: io::Error) -> MmapError {
        MmapError::Io(e)
    }
}

impl From<rustix::io::Errno> for MmapError {
    fn from(e: rustix::io::Errno) -> MmapError {
        MmapError::Io(e.into())
    }
}

/// Checks `offset..offset + len` against a file of `file_len` bytes.
fn check_range(offset: u64, len: u64, file_len: u64) -> Result<(), MmapError> {
    match offset.checked_add(len) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(MmapError::OutOfRange {
            offset,
            len,
            file_len,
        }),
    }
}

/// Maps `len` bytes of a sealed memfd from `offset`, read-only, as
/// [`Bytes`]. The mapping lives as long as any `Bytes` (or slice of it)
/// does. Refuses any file that is not sealed against shrinking, growing and
/// writing ([`MmapError::NotSealed`]).
pub fn sealed(file: &File, offset: u64, len: usize) -> Result<Bytes, MmapError> {
    let seals = rustix::fs::fcntl_get_seals(file).map_err(|_| MmapError::NotSealed)?;
    if !seals.contains(SAFE_SEALS) {
        return Err(MmapError::NotSealed);
    }
    check_range(offset, len as u64, file.metadata()?.len())?;
    if len == 0 {
        return Ok(Bytes::new()); // mmap refuses empty mappings
    }
    // SAFETY: the file is a memfd sealed against shrinking, growing and
    // writing (checked above, and seals can never be removed), so no
    // process can truncate or modify it while the mapping lives: every
    // page of `offset..offset + len` (in range, checked) stays readable and
    // unchanged. The mapping is read-only.
    #[allow(unsafe_code)]
    let map = unsafe { MmapOptions::new().offset(offset).len(len).map(file)? };
    Ok(Bytes::from_owner(map))
}

/// Copies `len` bytes of any file from `offset` into a new memfd, seals it
/// and maps it (see [`sealed`]). The copy is made by the kernel, never in
/// this process's memory: `copy_file_range`, or `sendfile` where the kernel
/// refuses that (another filesystem: the memfd is on tmpfs), and no
/// fallback through a buffer: a file neither can copy from (a pipe, a
/// socket) is an [`MmapError::Io`]. A later change to `src` does not
/// affect the frame; `src`'s file position is left as it was.
pub fn sealed_copy(src: &File, offset: u64, len: usize) -> Result<Bytes, MmapError> {
    check_range(offset, len as u64, src.metadata()?.len())?;
    let fd = rustix::fs::memfd_create(
        "framewire-frame",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let dst = File::from(fd);
    let copied = kernel_copy(src, offset, &dst, len)?;
    if copied != len as u64 {
        // The file shrank between the check and the copy.
        return Err(MmapError::OutOfRange {
            offset,
            len: len as u64,
            file_len: offset + copied,
        });
    }
    rustix::fs::fcntl_add_seals(&dst, SAFE_SEALS | SealFlags::SEAL)?;
    sealed(&dst, 0, len)
}

/// The most one system call is asked to copy.
const COPY_CHUNK: usize = 1 << 30;

/// Copies up to `len` bytes of `src` from `offset` to `dst`'s position,
/// inside the kernel; the bytes copied (fewer at the end of `src`).
fn kernel_copy(src: &File, mut offset: u64, dst: &File, len: usize) -> Result<u64, MmapError> {
    let mut done = 0usize;
    let mut sendfile = false;
    while done < len {
        let want = (len - done).min(COPY_CHUNK);
        let r = if sendfile {
            rustix::fs::sendfile(dst, src, Some(&mut offset), want)
        } else {
            rustix::fs::copy_file_range(src, Some(&mut offset), dst, None, want)
        };
        match r {
            Ok(0) => break, // the end of `src`
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            // copy_file_range refused before copying anything (EXDEV across
            // filesystems, ENOSYS, EINVAL...): the same with sendfile.
            Err(_) if !sendfile && done == 0 => sendfile = true,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done as u64)
}

/// A writable file mapping of a fixed size, backed by an anonymous
/// temporary file that only this process holds (unlinked at creation,
/// mode 0600) with every block allocated up front. Fill it, then
/// [`freeze`](SpillBuffer::freeze) it into [`Bytes`].
///
/// ```
/// use framewire::mmap::SpillBuffer;
///
/// let mut buf = SpillBuffer::new(std::env::temp_dir(), 3 << 20)?;
/// buf.as_mut().fill(7);
/// let frame = buf.freeze()?;
/// assert_eq!(frame.len(), 3 << 20);
/// assert_eq!(frame.slice(10..12), &[7, 7][..]);
/// # Ok::<(), framewire::mmap::MmapError>(())
/// ```
pub struct SpillBuffer {
    map: MmapMut,
    /// The anonymous file: kept for growing it.
    file: File,
}

impl fmt::Debug for SpillBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpillBuffer")
            .field("len", &self.map.len())
            .finish()
    }
}

impl SpillBuffer {
    /// A buffer of `len` bytes (at least 1) in an anonymous file in `dir`.
    /// A disk without room for `len` bytes is an error here.
    pub fn new(dir: impl AsRef<Path>, len: usize) -> Result<SpillBuffer, MmapError> {
        let len = len.max(1);
        let file = tempfile::tempfile_in(dir)?;
        // Allocate every block now: a write into a hole of a full disk
        // would be a SIGBUS; here it is ENOSPC.
        rustix::fs::fallocate(&file, FallocateFlags::empty(), 0, len as u64)?;
        // SAFETY: the file was created unlinked (no path names it) and its
        // only descriptor is `file`, owned by this buffer and never shrunk,
        // so no other code or process can truncate it while the mapping
        // lives; its blocks are allocated (fallocate above), so writes
        // cannot fault for lack of space. The mapping covers exactly the file.
        #[allow(unsafe_code)]
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file)? };
        Ok(SpillBuffer { map, file })
    }

    /// Grows the buffer to `len` bytes (more blocks allocated first, then
    /// the mapping extended); what it holds is kept. Smaller `len`: no-op.
    pub fn grow_to(&mut self, len: usize) -> Result<(), MmapError> {
        if len <= self.map.len() {
            return Ok(());
        }
        rustix::fs::fallocate(&self.file, FallocateFlags::empty(), 0, len as u64)?;
        // SAFETY: as in `new`: only this buffer holds the unlinked file,
        // which now has `len` allocated bytes, so the larger mapping is
        // backed in full and nobody can shrink it. `remap` may move the
        // mapping; no reference into it outlives this `&mut self` call.
        #[allow(unsafe_code)]
        unsafe {
            self.map
                .remap(len, memmap2::RemapOptions::new().may_move(true))?
        };
        Ok(())
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it is empty (never: at least one byte).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Makes the mapping read-only and hands it over as [`Bytes`].
    pub fn freeze(self) -> Result<Bytes, MmapError> {
        let map: Mmap = self.map.make_read_only()?;
        Ok(Bytes::from_owner(map))
    }
}

impl AsRef<[u8]> for SpillBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl AsMut<[u8]> for SpillBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot create or map files")]
    fn an_unsealed_file_is_never_mapped() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello").unwrap();
        assert!(matches!(sealed(&f, 0, 5), Err(MmapError::NotSealed)));
        // A memfd with only some of the seals is refused too.
        let fd =
            rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        let mut m = File::from(fd);
        m.write_all(b"hello").unwrap();
        rustix::fs::fcntl_add_seals(&m, SealFlags::SHRINK).unwrap();
        assert!(matches!(sealed(&m, 0, 5), Err(MmapError::NotSealed)));
        rustix::fs::fcntl_add_seals(&m, SealFlags::GROW | SealFlags::WRITE).unwrap();
        assert_eq!(sealed(&m, 1, 3).unwrap(), &b"ell"[..]);
        // Sealed: the kernel refuses to truncate it.
        assert!(m.set_len(1).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot create or map files")]
    fn ranges_past_the_end_are_errors() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[1; 100]).unwrap();
        for (offset, len) in [(0, 101), (100, 1), (u64::MAX, 1), (50, usize::MAX)] {
            assert!(
                matches!(
                    sealed_copy(&f, offset, len),
                    Err(MmapError::OutOfRange { file_len: 100, .. })
                ),
                "{offset} {len}"
            );
        }
        assert_eq!(sealed_copy(&f, 100, 0).unwrap(), Bytes::new());
        assert_eq!(sealed_copy(&f, 0, 100).unwrap(), &[1u8; 100][..]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot create or map files")]
    fn a_spill_buffer_grows_and_keeps_its_bytes() {
        let mut b = SpillBuffer::new(std::env::temp_dir(), 4096).unwrap();
        b.as_mut()[..4096].fill(3);
        b.grow_to(3 << 20).unwrap();
        assert_eq!(b.len(), 3 << 20);
        b.as_mut()[4096..].fill(4);
        b.grow_to(10).unwrap(); // never shrinks
        let frame = b.freeze().unwrap();
        assert!(frame[..4096].iter().all(|&x| x == 3));
        assert!(frame[4096..].iter().all(|&x| x == 4));
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot create or map files")]
    fn a_copy_does_not_see_later_changes_to_its_source() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[1; 8192]).unwrap();
        let frame = sealed_copy(&f, 0, 8192).unwrap();
        f.set_len(0).unwrap(); // would be a SIGBUS for a direct mapping
        f.write_all(&[2; 10]).unwrap();
        assert!(frame.iter().all(|&b| b == 1));
        let slice = frame.slice(4096..4100);
        drop(frame);
        assert_eq!(slice, &[1u8; 4][..]); // the mapping lives with its slices
    }
}
