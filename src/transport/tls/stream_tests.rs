//! The stream against rustls' own (tokio-rustls, the old path) on the
//! other end: whole messages both ways, key updates at the limit.

use super::*;
