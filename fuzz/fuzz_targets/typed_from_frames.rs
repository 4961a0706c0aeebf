//! Typed messages, the direct path: arbitrary frame lists →
//! `typed::from_frames` into the Dask channel enums (as batches and alone)
//! and a `Value`, under strict and Dask-compatible limits. Oracle: the same
//! result as `loads` + `from_value` (value or error, never a panic), and a
//! message that decodes writes back (`to_frames`) exactly as `to_value` +
//! `dumps_with` write it.
#![no_main]
use std::fmt::Debug;

use bytes::Bytes;
use framewire::dask::{SchedulerToWorker, WorkerRequest, WorkerToScheduler};
use framewire::typed::{from_frames, to_frames};
use framewire::{
    dumps_with, from_value, loads_with, to_value, DeserializeOptions, Limits, SerializeOptions, Value,
};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;

fn check<T: DeserializeOwned + Serialize + Debug>(frames: &[Bytes], opts: &DeserializeOptions) {
    let direct = from_frames::<T>(frames, opts);
    let dynamic = loads_with(frames, opts).and_then(from_value::<T>);
    // Compared as printed: a NaN is unequal to itself.
    assert_eq!(format!("{direct:?}"), format!("{dynamic:?}"), "from_frames vs loads + from_value");
    if let Ok(typed) = direct {
        let s = SerializeOptions::default();
        let written = to_frames(&typed, &s);
        let expected = to_value(&typed).and_then(|v| dumps_with(&v, &s));
        assert_eq!(written, expected, "to_frames vs to_value + dumps");
    }
}

fuzz_target!(|input: (Vec<u8>, Vec<Vec<u8>>)| {
    let (frame0, rest) = input;
    let mut frames = vec![Bytes::from(frame0)];
    frames.extend(rest.into_iter().take(64).map(Bytes::from));
    for limits in [Limits::strict(), Limits::dask_compat()] {
        let opts = DeserializeOptions::with_limits(limits);
        check::<Vec<SchedulerToWorker>>(&frames, &opts);
        check::<Vec<WorkerToScheduler>>(&frames, &opts);
        check::<WorkerRequest>(&frames, &opts);
        check::<Value>(&frames, &opts);
    }
});
