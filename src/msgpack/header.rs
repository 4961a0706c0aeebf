//! A sub-header's map, decoded from its bytes the first time it is asked
//! for: the value layer holds the bytes, this layer knows how to read them.

use super::decode::{decode, plain_map};
use super::reader::CHECKED;
use crate::value::{Header, Value};

impl Header {
    /// The header map.
    pub fn map(&self) -> &Value {
        self.map.get_or_init(|| {
            let raw = self
                .raw
                .as_ref()
                .expect("a header without a map has raw bytes");
            // Checked when the block was claimed, with limits at least this
            // tight, or written by the serialize layer.
            decode(raw, 0, &CHECKED, &mut plain_map).unwrap_or(Value::Nil)
        })
    }

    /// Looks up a string key in the header map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map().get(key)
    }
}

/// Two headers are equal when their maps are (whatever bytes they came in).
impl PartialEq for Header {
    fn eq(&self, other: &Header) -> bool {
        self.map() == other.map()
    }
}
