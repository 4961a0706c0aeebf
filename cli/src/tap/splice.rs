//! Linux `splice(2)`: bytes moved from one socket to another through a
//! pipe, never copied into the tap's memory.
//!
//! ```text
//! from ──splice──▶ pipe ──splice──▶ to        (socket → pipe: the kernel hands
//!                                              over its buffers' pages; pipe →
//!                                              socket: they are queued as they are)
//! ```
//!
//! A pipe is taken from a small process-wide pool for the rest of one
//! message, and given back empty: an idle connection holds none (two file
//! descriptors and up to [`PIPE_SIZE`] of kernel memory each). The pool keeps
//! at most [`POOL_MAX`]; a pipe that may still hold bytes (an error in the
//! middle) is closed instead.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

use rustix::pipe::{fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, PipeFlags, SpliceFlags};

/// The capacity asked for each pipe (`F_SETPIPE_SZ`): 256 pages, so that one
/// pair of calls moves up to 1 MiB. Above `/proc/sys/fs/pipe-max-size` or
/// the user's pipe-buffer budget, the kernel's default (64 KiB) is kept.
pub(super) const PIPE_SIZE: usize = 1 << 20;

/// Idle pipes kept for reuse.
const POOL_MAX: usize = 16;

static POOL: Mutex<Vec<Pipe>> = Mutex::new(Vec::new());

/// A non-blocking pipe.
#[derive(Debug)]
pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Its capacity in bytes.
    pub(super) size: usize,
}

impl Pipe {
    /// One from the pool, or a new one.
    pub(super) fn take() -> io::Result<Pipe> {
        if let Some(p) = POOL.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(p);
        }
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let size = fcntl_setpipe_size(&write, PIPE_SIZE)
            .or_else(|_| fcntl_getpipe_size(&write))
            .unwrap_or(64 << 10);
        Ok(Pipe { read, write, size })
    }

    /// Back to the pool; the pipe must be empty.
    pub(super) fn give_back(self) {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL_MAX {
            pool.push(self);
        }
    }

    /// Moves up to `len` bytes from the socket `from` into the pipe, without
    /// blocking (`WouldBlock` when the socket has nothing; 0 at its end).
    /// The pipe must be empty, so that `WouldBlock` can only mean the socket.
    pub(super) fn fill(&self, from: impl AsFd, len: usize) -> io::Result<usize> {
        Ok(rustix::pipe::splice(
            from,
            None,
            &self.write,
            None,
            len.min(self.size),
            SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
        )?)
    }

    /// Moves up to `len` bytes from the pipe to the socket `to`, without
    /// blocking (`WouldBlock` when the socket's send buffer is full).
    pub(super) fn drain(&self, to: impl AsFd, len: usize) -> io::Result<usize> {
        Ok(rustix::pipe::splice(
            &self.read,
            None,
            to,
            None,
            len,
            SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
        )?)
    }
}
