//! A reader of pickles of plain data (what `torch.cuda.memory._dump_snapshot` writes),
//! built for hostile input.
//!
//! It runs the pickle machine's stack and memo over an arena: every list, tuple, set
//! and dict is an entry of [`Pickle::containers`] and a value refers to it by index. An
//! object the pickle shares (a memo reference: `GET`, `BINGET`, `LONG_BINGET`; PyTorch
//! shares one stack-frame list among thousands of events) is therefore one object
//! referred to many times, as in Python, never a copy: a 2 MB snapshot stays a few MB in
//! memory, and a structure that refers to itself is no trouble, since nothing here
//! recurses. Whatever names Python code (a global, a call, an object built, a persistent
//! id) is refused before anything runs; so is anything malformed, with the byte offset.

use std::collections::HashMap;
use std::rc::Rc;

/// An index into [`Pickle::containers`].
pub type ContainerId = usize;

/// A value of the pickle. Containers are indices; strings and bytes are shared, so that
/// copying a value (a memo reference) costs nothing.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer that fits 128 bits.
    Int(i128),
    /// An integer that does not.
    BigInt,
    /// A float.
    Float(f64),
    /// A text string (also Python 2's `str`, when it is UTF-8).
    Str(Rc<str>),
    /// Bytes.
    Bytes(Rc<[u8]>),
    /// A list, tuple or set.
    List(ContainerId),
    /// A dict.
    Dict(ContainerId),
}

/// A container's items.
#[derive(Debug, PartialEq)]
pub enum Container {
    /// A list, tuple or set: its items in order.
    List(Vec<Value>),
    /// A dict: its entries in insertion order (a later entry with an equal key wins).
    Dict(Vec<(Value, Value)>),
}

/// A pickle read whole.
#[derive(Debug)]
pub struct Pickle {
    /// Every container the pickle built.
    pub containers: Vec<Container>,
    /// What it returns (the value on the stack at `STOP`).
    pub root: Value,
}

/// Why a pickle could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It names Python code (a global, a call, an object to build).
    Code,
    /// It is malformed: what, at which byte offset.
    Malformed {
        /// The byte offset of the opcode.
        at: usize,
        /// What is wrong there.
        message: String,
    },
}

/// A stack entry: a mark or a value.
#[derive(Clone, Debug)]
enum Item {
    Mark,
    Value(Value),
}

/// Reads little-endian length or index fields.
fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |n, b| (n << 8) | u64::from(*b))
}

/// A little-endian two's complement integer (`LONG1`, `LONG4`).
fn long(bytes: &[u8]) -> Value {
    if bytes.len() > 16 {
        // Python writes the shortest form: more than 16 bytes is more than 128 bits.
        return Value::BigInt;
    }
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    let mut n: i128 = if negative { -1 } else { 0 };
    for &b in bytes.iter().rev() {
        n = (n << 8) | i128::from(b);
    }
    Value::Int(n)
}

/// The text of a decimal `INT` or `LONG` line (`I01` and `I00` are Python 2's booleans).
fn decimal(line: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(line).ok()?.trim();
    match text {
        "01" => return Some(Value::Bool(true)),
        "00" => return Some(Value::Bool(false)),
        _ => {}
    }
    let digits = text.strip_suffix('L').unwrap_or(text);
    let unsigned = digits.strip_prefix('-').unwrap_or(digits);
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().map_or(Value::BigInt, Value::Int))
}

/// The text of a `FLOAT` line.
fn float(line: &[u8]) -> Option<Value> {
    let v = std::str::from_utf8(line).ok()?.trim().parse().ok()?;
    Some(Value::Float(v))
}

/// A protocol 0 `STRING` line: a quoted Python literal (escapes are kept as written;
/// a snapshot's keys and actions have none).
fn quoted(line: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(line).ok()?.trim();
    let inner = text
        .strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))?;
    Some(Value::Str(inner.into()))
}

/// A string's bytes as text, or as bytes where they are not UTF-8.
fn text(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::Str(s.into()),
        Err(_) => Value::Bytes(bytes.into()),
    }
}

/// Reads `pickle` (see the module documentation).
pub fn read(pickle: &[u8]) -> Result<Pickle, Refusal> {
    Machine::default().run(pickle)
}

/// The pickle's bytes, where the machine reads, and the opcode it runs.
struct Cursor<'a> {
    pickle: &'a [u8],
    /// The next byte to read.
    at: usize,
    /// The byte offset of the opcode, which errors name.
    start: usize,
    /// The opcode.
    op: u8,
}

impl<'a> Cursor<'a> {
    /// Reads the next opcode; false at the end of the pickle.
    fn next_op(&mut self) -> bool {
        let Some(&op) = self.pickle.get(self.at) else {
            return false;
        };
        (self.start, self.op) = (self.at, op);
        self.at += 1;
        true
    }

    /// The opcode is malformed: `message` says how.
    fn bad(&self, message: String) -> Refusal {
        Refusal::Malformed {
            at: self.start,
            message,
        }
    }

    /// Takes `n` argument bytes.
    fn arg(&mut self, n: u64) -> Result<&'a [u8], Refusal> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        match self
            .at
            .checked_add(n)
            .and_then(|end| self.pickle.get(self.at..end))
        {
            Some(a) => {
                self.at += n;
                Ok(a)
            }
            None => Err(self.bad(format!(
                "opcode {:#04x} needs {n} bytes; the pickle ends (is it truncated?)",
                self.op
            ))),
        }
    }

    /// Takes the argument line (without its newline).
    fn line(&mut self) -> Result<&'a [u8], Refusal> {
        let Some(n) = self.pickle[self.at..].iter().position(|b| *b == b'\n') else {
            return Err(self.bad(unended(self.op)));
        };
        let l = &self.pickle[self.at..self.at + n];
        self.at += n + 1;
        Ok(l)
    }

    /// The value the opcode pushes if it pushes one that needs no container (none, a
    /// boolean, a number, a string or bytes), taking its arguments; `None` for any
    /// other opcode.
    fn scalar(&mut self) -> Result<Option<Value>, Refusal> {
        let op = self.op;
        let v = match op {
            b'N' => Value::None,
            0x88 => Value::Bool(true),
            0x89 => Value::Bool(false),
            // Protocol 0's values on a line of their own.
            b'I' | b'L' | b'F' | b'S' | b'V' => {
                let line = self.line()?;
                let (v, what) = match op {
                    b'I' | b'L' => (decimal(line), "an integer"),
                    b'F' => (float(line), "a float"),
                    b'S' => (quoted(line), "a quoted string"),
                    _ => (Some(text(line)), "text"),
                };
                v.ok_or_else(|| {
                    self.bad(format!("opcode {:?} takes {what} on its line", op as char))
                })?
            }
            b'J' => {
                Value::Int(i32::from_le_bytes(self.arg(4)?.try_into().expect("4 bytes")).into())
            }
            b'K' => Value::Int(self.arg(1)?[0].into()),
            b'M' => Value::Int(le(self.arg(2)?).into()),
            b'G' => Value::Float(f64::from_be_bytes(
                self.arg(8)?.try_into().expect("8 bytes"),
            )),
            0x8a | 0x8b => {
                let n = le(self.arg(if op == 0x8a { 1 } else { 4 })?);
                long(self.arg(n)?)
            }
            // Strings and bytes: a length of 1, 4 or 8 bytes, then the contents.
            b'T' | b'U' | b'X' | 0x8c | 0x8d | b'B' | b'C' | 0x8e | 0x96 => {
                let width = match op {
                    b'U' | 0x8c | b'C' => 1,
                    b'T' | b'X' | b'B' => 4,
                    _ => 8,
                };
                let n = le(self.arg(width)?);
                let contents = self.arg(n)?;
                match op {
                    b'B' | b'C' | 0x8e | 0x96 => Value::Bytes(contents.into()),
                    _ => text(contents),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(v))
    }
}

/// The pickle machine: its stack (marks split it), memo and the containers built.
#[derive(Default)]
struct Machine {
    stack: Vec<Item>,
    memo: HashMap<u64, Value>,
    containers: Vec<Container>,
}

impl Machine {
    fn container(&mut self, c: Container) -> ContainerId {
        self.containers.push(c);
        self.containers.len() - 1
    }

    fn run(mut self, pickle: &[u8]) -> Result<Pickle, Refusal> {
        let mut cursor = Cursor {
            pickle,
            at: 0,
            start: 0,
            op: 0,
        };
        while cursor.next_op() {
            if cursor.op == b'.' {
                let root = self.pop(cursor.start)?;
                return Ok(Pickle {
                    containers: self.containers,
                    root,
                });
            }
            self.step(&mut cursor)?;
        }
        Err(Refusal::Malformed {
            at: pickle.len(),
            message: "the pickle ends without its STOP opcode (is it truncated?)".into(),
        })
    }

    /// Runs the opcode under `c` (any but `STOP`), taking its arguments.
    fn step(&mut self, c: &mut Cursor) -> Result<(), Refusal> {
        if let Some(v) = c.scalar()? {
            self.push(v);
            return Ok(());
        }
        if self.build(c)? {
            return Ok(());
        }
        let (op, start) = (c.op, c.start);
        match op {
            // Globals, calls, objects built, persistent ids, extensions: code.
            b'c' | b'i' | b'o' | b'R' | b'b' | b'P' | b'Q' | 0x81 | 0x82 | 0x83 | 0x84 | 0x92
            | 0x93 => return Err(Refusal::Code),
            0x80 => {
                c.arg(1)?;
            }
            0x95 => {
                c.arg(8)?;
            }
            b'(' => self.stack.push(Item::Mark),
            b'0' => {
                self.pop_item(start)?;
            }
            b'1' => {
                self.pop_to_mark(start)?;
            }
            b'2' => {
                let top = self.peek(start)?;
                self.push(top);
            }
            0x94 => {
                let top = self.peek(start)?;
                self.memo.insert(self.memo.len() as u64, top);
            }
            b'p' | b'q' | b'r' | b'g' | b'h' | b'j' => self.memo_op(c)?,
            0x97 | 0x98 => {
                return Err(
                    c.bad("out-of-band buffers (protocol 5) are not data a snapshot holds".into())
                );
            }
            _ => return Err(c.bad(format!("unknown opcode {op:#04x}; not a pickle?"))),
        }
        Ok(())
    }

    /// Runs the opcode under `c` if it builds a list, tuple, set or dict or adds items to
    /// one; says whether it did.
    fn build(&mut self, c: &Cursor) -> Result<bool, Refusal> {
        let (op, start) = (c.op, c.start);
        match op {
            b']' | b')' | 0x8f => {
                let c = self.container(Container::List(Vec::new()));
                self.push(Value::List(c));
            }
            b'}' => {
                let c = self.container(Container::Dict(Vec::new()));
                self.push(Value::Dict(c));
            }
            b'l' | b't' | 0x91 => {
                let items = self.pop_to_mark(start)?;
                let c = self.container(Container::List(items));
                self.push(Value::List(c));
            }
            b'd' => {
                let items = self.pop_to_mark(start)?;
                let entries =
                    pairs(items).ok_or_else(|| c.bad("a dict with a key but no value".into()))?;
                let c = self.container(Container::Dict(entries));
                self.push(Value::Dict(c));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.pop(start)?);
                }
                items.reverse();
                let c = self.container(Container::List(items));
                self.push(Value::List(c));
            }
            b'a' => {
                let item = self.pop(start)?;
                self.extend_top(start, vec![item])?;
            }
            b's' => {
                let value = self.pop(start)?;
                let key = self.pop(start)?;
                self.extend_top(start, vec![key, value])?;
            }
            b'e' | b'u' | 0x90 => {
                let items = self.pop_to_mark(start)?;
                self.extend_top(start, items)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A memo put or get: its index on a decimal line, in one byte or in four bytes.
    fn memo_op(&mut self, c: &mut Cursor) -> Result<(), Refusal> {
        let index = match c.op {
            b'p' | b'g' => std::str::from_utf8(c.line()?)
                .ok()
                .and_then(|l| l.trim().parse().ok())
                .ok_or_else(|| c.bad("a memo index line that is not a number".into()))?,
            b'q' | b'h' => le(c.arg(1)?),
            _ => le(c.arg(4)?),
        };
        if matches!(c.op, b'p' | b'q' | b'r') {
            let top = self.peek(c.start)?;
            self.memo.insert(index, top);
        } else {
            let v = self
                .memo
                .get(&index)
                .cloned()
                .ok_or_else(|| c.bad(format!("memo entry {index} is used before it is set")))?;
            self.push(v);
        }
        Ok(())
    }

    fn push(&mut self, v: Value) {
        self.stack.push(Item::Value(v));
    }

    fn pop_item(&mut self, at: usize) -> Result<Item, Refusal> {
        self.stack.pop().ok_or_else(|| underflow(at))
    }

    fn pop(&mut self, at: usize) -> Result<Value, Refusal> {
        match self.pop_item(at)? {
            Item::Value(v) => Ok(v),
            Item::Mark => Err(underflow(at)),
        }
    }

    fn peek(&self, at: usize) -> Result<Value, Refusal> {
        match self.stack.last() {
            Some(Item::Value(v)) => Ok(v.clone()),
            _ => Err(underflow(at)),
        }
    }

    /// The values above the last mark, which goes too.
    fn pop_to_mark(&mut self, at: usize) -> Result<Vec<Value>, Refusal> {
        let mark = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or_else(|| Refusal::Malformed {
                at,
                message: "an opcode that needs a mark, with none on the stack".into(),
            })?;
        Ok(self
            .stack
            .drain(mark..)
            .skip(1)
            .map(|i| match i {
                Item::Value(v) => v,
                Item::Mark => unreachable!("the last mark"),
            })
            .collect())
    }

    /// Appends `items` to the container on top of the stack: to a list as they are, to a
    /// dict as key-value pairs.
    fn extend_top(&mut self, at: usize, items: Vec<Value>) -> Result<(), Refusal> {
        let bad = |message: &str| Refusal::Malformed {
            at,
            message: message.into(),
        };
        match self.peek(at)? {
            Value::List(c) => match &mut self.containers[c] {
                Container::List(l) => l.extend(items),
                Container::Dict(_) => unreachable!("a list value names a list"),
            },
            Value::Dict(c) => {
                let entries =
                    pairs(items).ok_or_else(|| bad("a dict item with a key but no value"))?;
                match &mut self.containers[c] {
                    Container::Dict(d) => d.extend(entries),
                    Container::List(_) => unreachable!("a dict value names a dict"),
                }
            }
            _ => return Err(bad("items added to something that is no list, set or dict")),
        }
        Ok(())
    }
}

/// Key-value pairs of a flat list, or `None` where one key has no value.
fn pairs(items: Vec<Value>) -> Option<Vec<(Value, Value)>> {
    if !items.len().is_multiple_of(2) {
        return None;
    }
    let mut it = items.into_iter();
    let mut out = Vec::with_capacity(it.len() / 2);
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Some(out)
}

fn unended(op: u8) -> String {
    format!(
        "opcode {:?} takes a line, and the pickle ends before its newline (is it truncated?)",
        op as char
    )
}

fn underflow(at: usize) -> Refusal {
    Refusal::Malformed {
        at,
        message: "an opcode takes a value the stack does not hold".into(),
    }
}

impl Pickle {
    /// The items of the list, tuple or set `c`.
    pub fn list(&self, c: ContainerId) -> &[Value] {
        match &self.containers[c] {
            Container::List(l) => l,
            Container::Dict(_) => &[],
        }
    }

    /// The value of the string key `key` in the dict `c` (the last entry, as Python keeps).
    pub fn get(&self, c: ContainerId, key: &str) -> Option<&Value> {
        let Container::Dict(d) = &self.containers[c] else {
            return None;
        };
        d.iter().rev().find_map(|(k, v)| match k {
            Value::Str(s) if &**s == key => Some(v),
            Value::Bytes(b) if &**b == key.as_bytes() => Some(v),
            _ => None,
        })
    }
}

/// For tests: a pickle of `depth` lists, each the only item of the one before.
#[cfg(test)]
pub(crate) fn nested_lists(depth: usize) -> Vec<u8> {
    let mut bytes = vec![0x80, 0x02];
    bytes.extend(std::iter::repeat_n(b']', depth));
    bytes.extend(std::iter::repeat_n(b'a', depth - 1));
    bytes.push(b'.');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_of_any_depth_is_read_without_recursion() {
        let depth = 200_000;
        let p = read(&nested_lists(depth)).unwrap();
        assert_eq!(p.containers.len(), depth);
        assert_eq!(p.root, Value::List(0));
        assert_eq!(p.list(0), &[Value::List(1)]);
    }

    #[test]
    fn a_memo_reference_is_the_same_object_not_a_copy() {
        // d = {'k': 1}; [d, d, d], as Python's pickler writes it (protocol 2): the dict is
        // put in the memo once (BINPUT 1), then fetched twice (BINGET 1).
        let bytes = b"\x80\x02]q\x00(}q\x01X\x01\x00\x00\x00kq\x02K\x01sh\x01h\x01e.";
        let p = read(bytes).unwrap();
        assert_eq!(p.containers.len(), 2, "one list, one dict");
        assert_eq!(p.list(0), &[Value::Dict(1), Value::Dict(1), Value::Dict(1)]);
        assert_eq!(p.get(1, "k"), Some(&Value::Int(1)));
        // A structure that holds itself (l = []; l.append(l)) is read too.
        let p = read(b"\x80\x02]q\x00h\x00a.").unwrap();
        assert_eq!(p.list(0), &[Value::List(0)]);
    }

    #[test]
    fn code_is_refused_and_malformed_pickles_say_where() {
        assert_eq!(
            read(b"cos\nsystem\n(S'echo hi'\ntR.").unwrap_err(),
            Refusal::Code
        );
        let Refusal::Malformed { at, message } = read(b"\x80\x04\x95\x10").unwrap_err() else {
            panic!("malformed")
        };
        assert_eq!(at, 2);
        assert!(message.contains("truncated"), "{message}");
        assert!(matches!(
            read(b"not a pickle"),
            Err(Refusal::Malformed { at: 0, .. })
        ));
        let Refusal::Malformed { message, .. } = read(b"\x80\x02h\x05.").unwrap_err() else {
            panic!("malformed")
        };
        assert_eq!(message, "memo entry 5 is used before it is set");
    }

    #[test]
    fn integers_of_every_width_are_read() {
        // LONG1 of 8 bytes: 2^63 + 1; LONG1 of -1; BININT -2; INT line.
        let p = read(b"\x80\x02(\x8a\x09\x01\x00\x00\x00\x00\x00\x00\x80\x00\x8a\x01\xffJ\xfe\xff\xff\xffI42\nl.")
            .unwrap();
        assert_eq!(
            p.list(0),
            &[
                Value::Int((1i128 << 63) + 1),
                Value::Int(-1),
                Value::Int(-2),
                Value::Int(42)
            ]
        );
    }
}
