//! The event queue of the discrete-event simulators (the discrete GPU's engine and the
//! virtualised integrated GPU's, `gpuswap-vgpu`): events in (time, sequence) order, so
//! ties resolve in scheduling order and a run always goes the same way.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Events ordered by (time, sequence number).
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(u64, u64, E)>>,
    next_seq: u64,
}

impl<E: Ord> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<E: Ord> EventQueue<E> {
    /// Schedules `event` at `time_ns`, after every event already scheduled for then.
    pub fn push(&mut self, time_ns: u64, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.push_keyed(time_ns, seq, event);
    }

    /// Schedules `event` with a sequence number of the caller's (a simulator that keeps
    /// some events outside the queue numbers all of them itself).
    pub fn push_keyed(&mut self, time_ns: u64, seq: u64, event: E) {
        self.heap.push(Reverse((time_ns, seq, event)));
    }

    /// The (time, sequence number) of the next event.
    pub fn peek_key(&self) -> Option<(u64, u64)> {
        self.heap.peek().map(|Reverse((t, s, _))| (*t, *s))
    }

    /// Takes the next event: (time, event).
    pub fn pop(&mut self) -> Option<(u64, E)> {
        self.heap.pop().map(|Reverse((t, _, e))| (t, e))
    }

    /// Whether no event is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_in_scheduling_order() {
        let mut q = EventQueue::default();
        q.push(5, 'c');
        q.push(1, 'b');
        q.push(5, 'a');
        q.push_keyed(1, 100, 'z');
        assert_eq!(q.peek_key(), Some((1, 1)));
        let order: Vec<(u64, char)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(1, 'b'), (1, 'z'), (5, 'c'), (5, 'a')]);
        assert!(q.is_empty());
    }
}
