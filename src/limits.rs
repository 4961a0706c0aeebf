//! [`Limits`]: every size a peer declares is checked against these before
//! anything is allocated for it (SPEC.md §7).

/// Bounds on what a decoder accepts. One value, checked before allocation.
///
/// [`Limits::default()`] is [`Limits::strict()`]: safe for untrusted peers,
/// but it refuses Dask's 64 MiB shards. Use [`Limits::dask_compat()`] to
/// accept everything a real Dask `distributed` peer sends.
///
/// ```
/// use framewire::Limits;
/// let limits = Limits::dask_compat();
/// assert_eq!(limits.max_depth, 1024);
/// let mut tight = Limits::strict();
/// tight.max_frames = 16;
/// assert_eq!(tight.max_frames, 16);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Frames in one message. Stops a prelude that declares 2^60 frames
    /// (each costs a 32-byte `Bytes` handle and a length entry).
    pub max_frames: usize,
    /// Bytes in one frame. Stops a single length field from reserving memory.
    pub max_frame_len: u64,
    /// Bytes in one message (the sum of its frame lengths, checked for
    /// overflow). Bounds the memory one message can hold.
    pub max_message_len: u64,
    /// Bytes in one msgpack frame (frame 0 or a sub-header), checked before
    /// parsing starts.
    pub max_header_len: u64,
    /// Bytes reserved ahead of bytes that have actually arrived. Buffers grow
    /// as data comes in, never to a size a peer merely declared.
    pub prealloc_cap: usize,
    /// Nesting of msgpack containers (and, in the serialize layer, of
    /// `is-collection` headers). Decoding and encoding are iterative; dropping
    /// a decoded [`Value`](crate::Value) recurses once per level, so this
    /// also bounds the stack a drop needs (at 1024 levels: under 512 KiB in
    /// debug builds, under 128 KiB in release builds).
    pub max_depth: usize,
    /// msgpack items (every value, key and container counts one) decoded from
    /// one frame: stops item-count bombs that stay within the byte limits.
    pub max_msgpack_items: usize,
}

impl Limits {
    /// Safe limits for untrusted peers (the default).
    pub const fn strict() -> Limits {
        Limits {
            max_frames: 1024,
            max_frame_len: 16 << 20,
            max_message_len: 64 << 20,
            max_header_len: 1 << 20,
            prealloc_cap: 64 << 10,
            max_depth: 64,
            max_msgpack_items: 64 << 10,
        }
    }

    /// Limits that accept everything real Dask `distributed` 2026.8.0 sends:
    /// msgpack nesting up to its own 1024-level limit, frames up to 1 GiB
    /// (frame 0, `ToPickle` buffers and pre-built `Serialized` frames are not
    /// sharded), messages up to 4 GiB.
    pub const fn dask_compat() -> Limits {
        Limits {
            max_frames: 65_536,
            max_frame_len: 1 << 30,
            max_message_len: 4 << 30,
            max_header_len: 256 << 20,
            prealloc_cap: 1 << 20,
            max_depth: 1024,
            max_msgpack_items: 16 << 20,
        }
    }

    /// No limits: only for bytes already checked under real limits.
    pub(crate) const fn unchecked() -> Limits {
        Limits {
            max_frames: usize::MAX,
            max_frame_len: u64::MAX,
            max_message_len: u64::MAX,
            max_header_len: u64::MAX,
            prealloc_cap: 64 << 10,
            max_depth: usize::MAX,
            max_msgpack_items: usize::MAX,
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::strict()
    }
}
