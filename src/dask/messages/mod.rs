//! The Dask 2026.8.0 messages, a file per channel: the channel's enum,
//! then its messages, field by field in the order Dask writes them
//! (`tests/dask/ops-2026.8.0.md` has the source line of each), each with
//! its op name and its constructor. A message sent on more than one channel
//! lives with the first that lists it (`close`, `close-stream` and
//! `worker-status-change` with the scheduler's stream to a worker,
//! `identity` with the requests to a worker, `register-client` with the
//! client's stream).

/// A channel's enum: a variant per message type, and `Other` for any other
/// op, read and written by op.
macro_rules! channel {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident($ty:ty)),* $(,)? }
    ) => {
        $(#[$meta])*
        // A message is built and moved once; boxing the large ones
        // (`compute-task`, `register-worker`) would only add allocations.
        #[allow(clippy::large_enum_variant)]
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* $variant($ty),)*
            /// Any other message, whole (unknown ops pass through untouched).
            Other(crate::value::Value),
        }

        impl $name {
            /// The message's op.
            pub fn op(&self) -> Option<&str> {
                match self {
                    $($name::$variant(_) => Some(<$ty as crate::dask::OpName>::NAME),)*
                    $name::Other(v) => crate::dask::wire::op_of(v),
                }
            }

            /// The message read from a map: the type its `op` names, or
            /// [`Other`]($name::Other) for an op this enum does not know.
            /// A known op whose fields are wrong is an error naming the field.
            pub fn from_value(v: crate::value::Value) -> Result<$name, crate::DecodeError> {
                $(if crate::dask::wire::op_of(&v) == Some(<$ty as crate::dask::OpName>::NAME) {
                    return crate::typed::from_value(v).map($name::$variant);
                })*
                Ok($name::Other(v))
            }
        }

        $(impl From<$ty> for $name {
            fn from(m: $ty) -> $name {
                $name::$variant(m)
            }
        })*

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $($name::$variant(m) => serde::Serialize::serialize(m, s),)*
                    $name::Other(v) => serde::Serialize::serialize(v, s),
                }
            }
        }

        /// Read by op: from a framewire conversion, the message is read
        /// straight into the type its op names (or `Other`); from any other
        /// deserializer, as a [`Value`](crate::value::Value) first.
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                const OPS: &[&str] = &[$(<$ty as crate::dask::OpName>::NAME),*];
                struct ByOp;
                impl<'de> serde::de::Visitor<'de> for ByOp {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a message of ", stringify!($name)))
                    }
                    fn visit_enum<A: serde::de::EnumAccess<'de>>(
                        self,
                        data: A,
                    ) -> Result<$name, A::Error> {
                        use serde::de::VariantAccess;
                        let (op, message) = data.variant_seed(crate::dask::wire::OpSeed(OPS))?;
                        use crate::dask::wire::Dispatch;
                        $(if op == Dispatch::Known(<$ty as crate::dask::OpName>::NAME) {
                            return message.newtype_variant::<$ty>().map($name::$variant);
                        })*
                        message.newtype_variant::<crate::value::Value>().map($name::Other)
                    }
                    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
                        self,
                        d: D,
                    ) -> Result<$name, D::Error> {
                        let v = <crate::value::Value as serde::Deserialize>::deserialize(d)?;
                        // The field path of that conversion, in the message.
                        $name::from_value(v).map_err(serde::de::Error::custom)
                    }
                }
                d.deserialize_newtype_struct(crate::typed::by_op::BY_OP, ByOp)
            }
        }
    };
}

/// The op each message type is written and read with ([`OpName`](crate::dask::OpName)).
macro_rules! op_names {
    ($($ty:ty => $name:literal),* $(,)?) => {$(
        impl crate::dask::OpName for $ty {
            const NAME: &'static str = $name;
        }
    )*};
}

/// A request: the struct as written, then its last field, `reply`, as
/// Dask's `rpc` sets it (absent is `None`; nil reads as `Some(false)`:
/// [`reply_flag`](crate::dask::wire::reply_flag)), documented as given
/// after the struct or as "always true".
macro_rules! request {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($field:tt)* }
        $(#[$reply:meta])+
        reply
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($field)*
            $(#[$reply])+
            #[serde(
                default,
                skip_serializing_if = "Option::is_none",
                deserialize_with = "crate::dask::wire::reply_flag"
            )]
            pub reply: Option<bool>,
        }
    };
    ($(#[$meta:meta])* pub struct $name:ident { $($field:tt)* }) => {
        request! {
            $(#[$meta])*
            pub struct $name { $($field)* }
            /// Always true; set by [`Rpc`](crate::dask::Rpc).
            reply
        }
    };
}

mod client_requests;
mod client_to_scheduler;
mod scheduler_requests;
mod scheduler_to_client;
mod scheduler_to_worker;
mod worker_requests;
mod worker_to_scheduler;

pub use client_requests::*;
pub use client_to_scheduler::*;
pub use scheduler_requests::*;
pub use scheduler_to_client::*;
pub use scheduler_to_worker::*;
pub use worker_requests::*;
pub use worker_to_scheduler::*;
