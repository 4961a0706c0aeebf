//! [`Codec`]: the compression codecs Dask names in headers and handshakes
//! (what each one does to bytes is in `compression.rs`).

/// A compression codec Dask names in a header's `compression` list.
///
/// Every codec has a cargo feature of its name; a codec whose feature is
/// off is still named and read in headers, but not compressed or
/// decompressed ([`Codec::is_enabled`]).
///
/// ```
/// use framewire::serialize::Codec;
///
/// assert_eq!(Codec::from_name("lz4"), Some(Codec::Lz4));
/// assert_eq!(Codec::Zstd.name(), "zstd");
/// if Codec::Lz4.is_enabled() {
///     let packed = Codec::Lz4.compress(&vec![0u8; 50_000]).unwrap();
///     assert_eq!(&packed[..4], &50_000u32.to_le_bytes()); // Dask's 4-byte size prefix
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// `"lz4"`: a 4-byte little-endian uncompressed size, then a raw LZ4 block.
    Lz4,
    /// `"zstd"`: one zstd frame (level 3) with its content size.
    Zstd,
    /// `"snappy"`: a raw snappy block (varint size, then elements).
    Snappy,
    /// `"zlib"`: a zlib stream (level 6).
    Zlib,
}

impl Codec {
    /// Every codec, in the order Dask's `compressions` table lists them.
    pub const ALL: [Codec; 4] = [Codec::Zlib, Codec::Snappy, Codec::Lz4, Codec::Zstd];

    /// The name in headers and handshakes: `"lz4"`, `"zstd"`, `"snappy"`, `"zlib"`.
    pub const fn name(self) -> &'static str {
        match self {
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
            Codec::Snappy => "snappy",
            Codec::Zlib => "zlib",
        }
    }

    /// The codec with this exact name; `None` for anything else (`"auto"`
    /// included: what it means depends on what the sender has installed).
    pub fn from_name(name: &str) -> Option<Codec> {
        Codec::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The cargo feature that brings this codec (named after it).
    pub const fn feature(self) -> &'static str {
        self.name()
    }

    /// Whether this build can compress and decompress with this codec: its
    /// cargo feature is on. Headers naming a codec that is not enabled are
    /// still read; decompressing its frames is
    /// [`CompressionError::CodecNotEnabled`](super::CompressionError::CodecNotEnabled).
    pub const fn is_enabled(self) -> bool {
        match self {
            Codec::Lz4 => cfg!(feature = "lz4"),
            Codec::Zstd => cfg!(feature = "zstd"),
            Codec::Snappy => cfg!(feature = "snappy"),
            Codec::Zlib => cfg!(feature = "zlib"),
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
