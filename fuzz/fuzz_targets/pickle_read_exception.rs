//! `framewire::pickle::read_exception`: the inert reading of a `task-erred`
//! exception pickle (the input's first half) and traceback pickle (its
//! second half). Oracle: a typed result, never a panic, nothing run.
#![no_main]
use framewire::pickle;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (exception, traceback) = data.split_at(data.len() / 2);
    let _ = pickle::read_exception(exception, None);
    if let Ok(e) = pickle::read_exception(exception, Some(traceback)) {
        assert!(e.chain().count() <= 66, "a bounded cause chain");
    }
});
