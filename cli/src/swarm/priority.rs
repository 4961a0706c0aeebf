//! The order of a simulated worker's tasks and fetches: Dask's priority
//! tuples, as `worker_state_machine.py` compares them.

use framewire::dask::Number;

/// Dask's priority then the worker's `generation` (`ev.priority +
/// (self.generation,)`, `worker_state_machine.py:2856`), as order keys
/// ([`order_key`]) padded with the smallest: compared as the tuples are
/// (a shorter one first among equal prefixes), kept inline (a queue of
/// thousands of ready tasks is sifted at every start, without following a
/// pointer per comparison). A priority of more than 7 numbers keeps its
/// first 7.
pub type Priority = [i64; 8];

/// Dask's priority and the worker's generation as a [`Priority`].
pub fn priority_of(dask: &[Number], generation: i64) -> Priority {
    let mut p: Priority = [i64::MIN; 8];
    let given = dask.len().min(7);
    for (slot, n) in p.iter_mut().zip(&dask[..given]) {
        *slot = order_key(n.as_f64());
    }
    p[given] = order_key(generation as f64);
    p
}

/// The priority of a replica `acquire-replicas` asks for: `(1,)`, after
/// every task of the default priority (`_handle_acquire_replicas`,
/// `worker_state_machine.py:2804`).
pub fn replica() -> Priority {
    let mut p: Priority = [i64::MIN; 8];
    p[0] = order_key(1.0);
    p
}

/// A number as an integer ordered as the numbers are (`f64::total_cmp`'s
/// order), so that a user's fractional priority (`priority=0.5`) is
/// compared as Python compares it, with integers and with other
/// fractions. Priorities are integers far below 2^53, exact as `f64`s.
fn order_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ready tasks in the order Python sorts their `priority +
    /// (generation,)` tuples, fractional user priorities and tuples of
    /// different lengths included (the order below is Python's `sorted`
    /// of these tuples).
    #[test]
    fn priorities_order_as_python_tuples() {
        let (i, f) = (Number::Int, Number::Float);
        let given: Vec<(Vec<Number>, i64)> = vec![
            (vec![i(0), i(1)], 0),
            (vec![i(0), f(1.5)], -1),
            (vec![i(0), i(2)], -2),
            (vec![f(-0.5), i(3)], -3),
            (vec![i(0), i(1), i(5)], -4),
            (vec![i(0), i(1)], -5),
            (vec![i(1)], -6),
            (vec![i(0), f(-1.25), i(7)], -7),
        ];
        let mut order: Vec<usize> = (0..given.len()).collect();
        order.sort_by_key(|&n| priority_of(&given[n].0, given[n].1));
        assert_eq!(order, [3, 7, 5, 0, 4, 1, 2, 6]);
    }
}
