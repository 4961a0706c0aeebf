//! [`Limits`]: every size a peer declares is checked against these before
//! anything is allocated for it (SPEC.md §7).

/// Bounds on what a decoder accepts. One value, checked before allocation.
///
/// Two profiles:
///
/// * [`Limits::dask_compat()`] (the default) accepts every message a real
///   Dask `distributed` 2026.8.0 peer produces: Dask caps neither the frames
///   of a message (a 10⁶-key `scatter` has 2 × 10⁶ + 1) nor its size (a
///   large `gather` passes 4 GiB). What it bounds is memory *relative to the
///   bytes that have arrived*: a declared count or length costs nothing
///   until its bytes are here, so a peer can make framewire hold only a
///   small multiple of what it has actually sent.
/// * [`Limits::strict()`] is for peers you do not trust with your memory:
///   fixed ceilings per frame, per message and per msgpack frame, whatever
///   the peer sends. It refuses Dask's 64 MiB shards and large collections.
///
/// ```
/// use framewire::Limits;
/// let limits = Limits::default();
/// assert_eq!(limits, Limits::dask_compat());
/// assert_eq!(limits.max_depth, 1024);
/// let mut tight = Limits::strict();
/// tight.max_frames = 16;
/// assert_eq!(tight.max_frames, 16);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Frames in one message, checked before the length table is read:
    /// stops a prelude that declares 2^60 frames at once. Below it, a
    /// declared count costs nothing until its length table arrives (each
    /// frame costs 8 bytes of table on the wire, and about 48 bytes once
    /// decoded: its length and its `Bytes` handle).
    pub max_frames: usize,
    /// Bytes in one frame. A declared length never reserves memory (buffers
    /// grow as bytes arrive); this refuses a frame outright.
    pub max_frame_len: u64,
    /// Bytes in one message (the sum of its frame lengths, checked for
    /// overflow).
    pub max_message_len: u64,
    /// Bytes in one msgpack frame (frame 0 or a sub-header), checked before
    /// parsing starts.
    pub max_header_len: u64,
    /// Bytes reserved ahead of bytes that have actually arrived. Memory
    /// follows the data that came in, never a size a peer merely declared:
    /// a run of large frames longer than this is received into a mapping of
    /// its declared length whose pages are committed only as bytes land in
    /// them (or, where no mapping can be made, a heap buffer that grows
    /// geometrically, by what it holds and at least this much: never more
    /// than twice what arrived plus this).
    pub prealloc_cap: usize,
    /// Nesting of msgpack containers (and, in the serialize layer, of
    /// `is-collection` headers). Decoding and encoding are iterative; dropping
    /// a decoded [`Value`](crate::Value) recurses once per level, so this
    /// also bounds the stack a drop needs (at 1024 levels: under 512 KiB in
    /// debug builds, under 128 KiB in release builds).
    pub max_depth: usize,
    /// msgpack items (every value, key and container counts one) decoded from
    /// one frame: stops item-count bombs that stay within the byte limits.
    /// Every item takes at least one byte of the frame, so without this
    /// limit the items are bounded by [`max_header_len`](Limits::max_header_len).
    pub max_msgpack_items: usize,
    /// Values one pickle makes (`framewire::pickle`, feature `pickle`): every
    /// opcode that pushes one counts, and every value copied out of a shared
    /// reference. Stops value-count bombs that stay within the byte limits,
    /// and bounds the memo (indices below it). A pickle never makes more
    /// values than it has bytes, whatever this says; each costs up to about
    /// 120 bytes while it is read (a stack slot, as Python builds an object
    /// per opcode).
    pub max_pickle_values: usize,
    /// Bytes that the compressed frames of one message may decompress to,
    /// together (each frame is also bounded by `max_frame_len` and by Dask's
    /// own 2 GiB ceiling for a compressed frame). Compression is the one
    /// place where bytes received do not bound memory (a 1 KiB zstd frame
    /// can declare gigabytes), so this is a fixed budget in both profiles.
    pub max_decompressed_len: u64,
}

impl Limits {
    /// Safe limits for untrusted peers: fixed ceilings whatever the peer
    /// sends (at most 64 MiB of frames per message, 1 MiB per msgpack frame).
    pub const fn strict() -> Limits {
        Limits {
            max_frames: 1024,
            max_frame_len: 16 << 20,
            max_message_len: 64 << 20,
            max_header_len: 1 << 20,
            prealloc_cap: 64 << 10,
            max_depth: 64,
            max_msgpack_items: 64 << 10,
            max_pickle_values: 64 << 10,
            max_decompressed_len: 64 << 20,
        }
    }

    /// Limits that accept everything real Dask `distributed` 2026.8.0 sends
    /// (the default).
    ///
    /// Dask bounds neither frames per message nor bytes per frame or message,
    /// so neither does this profile (`max_frames` is 2^32 − 1, far beyond
    /// what a Python peer can hold, and stops a 2^60-frame prelude before
    /// its table is read). msgpack nesting is bounded at msgpack-python's
    /// own 1024 levels. Memory is bounded by the bytes received instead:
    /// receive buffers grow as bytes arrive (never more than what arrived
    /// plus `prealloc_cap` ahead), a decoded length table costs about 6 × its wire size, and a
    /// decoded msgpack frame at most about 80 bytes per byte (a `Value` per
    /// item, as Python builds an object per item). Decompressed output,
    /// which received bytes do not bound, has a 16 GiB budget per message.
    pub const fn dask_compat() -> Limits {
        Limits {
            max_frames: u32::MAX as usize,
            max_frame_len: u64::MAX,
            max_message_len: u64::MAX,
            max_header_len: u64::MAX,
            prealloc_cap: 1 << 20,
            max_depth: 1024,
            max_msgpack_items: usize::MAX,
            max_pickle_values: usize::MAX,
            max_decompressed_len: 16 << 30,
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
            max_pickle_values: usize::MAX,
            max_decompressed_len: u64::MAX,
        }
    }
}

/// [`Limits::dask_compat()`]: a Dask crate's default must accept what Dask
/// sends, including what framewire's own default
/// [`SerializeOptions`](crate::SerializeOptions) produce (64 MiB shards,
/// large collection headers). Use [`Limits::strict()`] for untrusted peers.
impl Default for Limits {
    fn default() -> Limits {
        Limits::dask_compat()
    }
}
