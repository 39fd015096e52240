//! A pass over a pickle's opcodes before it is read: the reader (serde-pickle) recurses
//! once per level of nesting, so a small file nesting deeply would overflow the stack
//! and abort the process. This pass follows the pickle machine's stack and memo with
//! each container's depth, and refuses a pickle that nests deeper than a snapshot ever
//! does or that names Python code. It reads nothing else: malformed pickles are left to
//! the reader, which says what is wrong with them.

use std::collections::HashMap;

/// The deepest nesting accepted. A memory snapshot nests about six levels (dict, list
/// of segments, segment, list of blocks, block, frames).
pub const MAX_DEPTH: u32 = 100;

/// Why a pickle is refused before reading.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It nests deeper than [`MAX_DEPTH`] (or refers to itself).
    TooDeep,
    /// It names Python code (a global, a call, an object to build).
    Code,
}

/// A stack entry: a mark, a value that holds nothing, or a container (its index).
#[derive(Clone, Copy)]
enum Item {
    Mark,
    Leaf,
    Container(usize),
}

/// Containers' depths and the containers holding each.
#[derive(Default)]
struct Containers {
    depth: Vec<u32>,
    parents: Vec<Vec<usize>>,
}

impl Containers {
    fn new_one(&mut self) -> usize {
        self.depth.push(1);
        self.parents.push(Vec::new());
        self.depth.len() - 1
    }

    /// `child` goes into `parent`: `parent`, and whatever holds it, may grow deeper.
    fn put(&mut self, parent: usize, child: Item) -> Result<(), Refusal> {
        let Item::Container(child) = child else {
            return Ok(());
        };
        self.parents[child].push(parent);
        let mut work = vec![(parent, self.depth[child] + 1)];
        while let Some((c, depth)) = work.pop() {
            if depth <= self.depth[c] {
                continue;
            }
            if depth > MAX_DEPTH {
                return Err(Refusal::TooDeep);
            }
            self.depth[c] = depth;
            work.extend(self.parents[c].iter().map(|&p| (p, depth + 1)));
        }
        Ok(())
    }

    /// A new container holding `children`.
    fn holding(&mut self, children: &[Item]) -> Result<Item, Refusal> {
        let c = self.new_one();
        for &child in children {
            self.put(c, child)?;
        }
        Ok(Item::Container(c))
    }
}

/// Reads little-endian length or index fields.
fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |n, b| (n << 8) | u64::from(*b))
}

/// Checks `pickle`; `Ok` also for pickles it cannot follow (the reader reports those).
pub fn scan(pickle: &[u8]) -> Result<(), Refusal> {
    let mut stack: Vec<Item> = Vec::new();
    let mut memo: HashMap<u64, Item> = HashMap::new();
    let mut containers = Containers::default();
    let mut at = 0;
    // Takes `n` argument bytes, or ends the scan at a truncated file.
    macro_rules! arg {
        ($n:expr) => {{
            let n = usize::try_from($n).unwrap_or(usize::MAX);
            match pickle.get(at..at.saturating_add(n)) {
                Some(a) if at.checked_add(n).is_some() => {
                    at += n;
                    a
                }
                _ => return Ok(()),
            }
        }};
    }
    macro_rules! line {
        () => {{
            match pickle[at..].iter().position(|b| *b == b'\n') {
                Some(n) => {
                    let l = &pickle[at..at + n];
                    at += n + 1;
                    l
                }
                None => return Ok(()),
            }
        }};
    }
    // Pops to the last mark (exclusive), or ends the scan when there is none.
    macro_rules! to_mark {
        () => {{
            match stack.iter().rposition(|i| matches!(i, Item::Mark)) {
                Some(m) => {
                    let items: Vec<Item> = stack.drain(m..).skip(1).collect();
                    items
                }
                None => return Ok(()),
            }
        }};
    }
    macro_rules! pop {
        () => {{
            match stack.pop() {
                Some(i) => i,
                None => return Ok(()),
            }
        }};
    }
    while at < pickle.len() {
        let op = pickle[at];
        at += 1;
        match op {
            b'.' => return Ok(()),
            // Globals, calls, objects built, persistent ids, extensions: code.
            b'c' | b'i' | b'o' | b'R' | b'b' | b'P' | b'Q' | 0x81 | 0x82 | 0x83 | 0x84 | 0x92
            | 0x93 => return Err(Refusal::Code),
            b'(' => stack.push(Item::Mark),
            b'0' => {
                pop!();
            }
            b'1' => {
                to_mark!();
            }
            b'2' => {
                let top = *stack.last().unwrap_or(&Item::Leaf);
                stack.push(top);
            }
            b'N' | 0x88 | 0x89 => stack.push(Item::Leaf),
            b']' | b'}' | b')' | 0x8f => {
                let c = containers.new_one();
                stack.push(Item::Container(c));
            }
            b'l' | b't' | b'd' | 0x91 => {
                let items = to_mark!();
                stack.push(containers.holding(&items)?);
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if stack.len() < n {
                    return Ok(());
                }
                let items: Vec<Item> = stack.split_off(stack.len() - n);
                stack.push(containers.holding(&items)?);
            }
            b'a' => {
                let child = pop!();
                if let Some(Item::Container(p)) = stack.last() {
                    containers.put(*p, child)?;
                }
            }
            b's' => {
                let (value, key) = (pop!(), pop!());
                if let Some(Item::Container(p)) = stack.last() {
                    containers.put(*p, key)?;
                    containers.put(*p, value)?;
                }
            }
            b'e' | b'u' | 0x90 => {
                let items = to_mark!();
                if let Some(Item::Container(p)) = stack.last() {
                    for item in items {
                        containers.put(*p, item)?;
                    }
                }
            }
            0x94 => {
                let top = *stack.last().unwrap_or(&Item::Leaf);
                memo.insert(memo.len() as u64, top);
            }
            // Memo puts and gets: a decimal line, one byte or four bytes of index.
            b'p' | b'q' | b'r' | b'g' | b'h' | b'j' => {
                let index = match op {
                    b'p' | b'g' => std::str::from_utf8(line!())
                        .ok()
                        .and_then(|l| l.trim().parse().ok())
                        .unwrap_or(u64::MAX),
                    b'q' | b'h' => le(arg!(1)),
                    _ => le(arg!(4)),
                };
                if matches!(op, b'p' | b'q' | b'r') {
                    memo.insert(index, *stack.last().unwrap_or(&Item::Leaf));
                } else {
                    stack.push(memo.get(&index).copied().unwrap_or(Item::Leaf));
                }
            }
            // Scalars with an argument.
            b'I' | b'L' | b'F' | b'S' | b'V' => {
                line!();
                stack.push(Item::Leaf);
            }
            b'J' | b'K' | b'M' | b'G' => {
                arg!(match op {
                    b'J' => 4,
                    b'K' => 1,
                    b'M' => 2,
                    _ => 8,
                });
                stack.push(Item::Leaf);
            }
            b'T' | b'X' | b'B' | 0x8b => {
                let n = le(arg!(4));
                arg!(n);
                stack.push(Item::Leaf);
            }
            b'U' | b'C' | 0x8c | 0x8a => {
                let n = le(arg!(1));
                arg!(n);
                stack.push(Item::Leaf);
            }
            0x8d | 0x8e | 0x96 => {
                let n = le(arg!(8));
                arg!(n);
                stack.push(Item::Leaf);
            }
            0x80 => {
                arg!(1);
            }
            0x95 => {
                arg!(8);
            }
            0x97 | 0x98 => {}
            // Unknown: the reader says so.
            _ => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> Vec<u8> {
        let mut bytes = vec![0x80, 0x02];
        bytes.extend(std::iter::repeat_n(b']', depth));
        bytes.extend(std::iter::repeat_n(b'a', depth - 1));
        bytes.push(b'.');
        bytes
    }

    #[test]
    fn nesting_is_measured_on_the_stack_and_through_the_memo() {
        assert_eq!(scan(&nested(MAX_DEPTH as usize)), Ok(()));
        assert_eq!(scan(&nested(MAX_DEPTH as usize + 1)), Err(Refusal::TooDeep));
        // Outside in, through the memo: L0 = []; L1 = [] into L0; L2 = [] into L1; ...
        // the stack never holds more than three items.
        let mut bytes = vec![0x80, 0x02, b']', b'q', 0];
        for level in 1..=MAX_DEPTH as u8 {
            bytes.extend([b'h', level - 1, b']', b'q', level, b'a', b'0']);
        }
        bytes.extend([b'h', 0, b'.']);
        assert_eq!(scan(&bytes), Err(Refusal::TooDeep));
    }

    #[test]
    fn code_is_refused_and_what_it_cannot_follow_left_to_the_reader() {
        assert_eq!(scan(b"cos\nsystem\n(S'echo hi'\ntR."), Err(Refusal::Code));
        assert_eq!(scan(b"\x80\x04\x95\x10"), Ok(()), "truncated");
        assert_eq!(scan(b"not a pickle"), Ok(()));
    }
}
