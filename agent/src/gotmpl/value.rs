//! The values a template works on, and the error it fails with: Go's `interface{}` values decoded from JSON,
//! printed as `fmt` prints them. A leaf: the parser, the functions and the evaluator all use it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::{Rc, Weak};

/// A template error: parse or execution, with the line where it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    pub(super) fn at(line: usize, what: &str) -> Error {
        Error(format!("line {line}: {what}"))
    }
    pub(super) fn msg(what: &str) -> Error {
        Error(what.to_owned())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// A value in a running template.
#[derive(Debug, Clone)]
pub enum Value {
    /// A key the data does not have (Go's invalid reflect.Value): prints `<no value>`.
    Missing,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Rc<RefCell<Vec<Value>>>),
    Map(Rc<RefCell<BTreeMap<String, Value>>>),
}

impl Value {
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            // encoding/json decodes every number into float64.
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(0.0)),
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(a) => list(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => map(o
                .iter()
                .map(|(k, v)| (k.clone(), Value::from_json(v)))
                .collect()),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        self.json_at(0)
    }

    fn json_at(&self, depth: usize) -> serde_json::Value {
        if depth > MAX_DEPTH {
            return serde_json::Value::Null;
        }
        match self {
            Value::Missing | Value::Nil => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Int(i) => (*i).into(),
            // encoding/json writes a float64 with no fraction as an integer.
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e15 => (*f as i64).into(),
            Value::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
            }
            Value::Str(s) => s.clone().into(),
            Value::List(l) => l.borrow().iter().map(|v| v.json_at(depth + 1)).collect(),
            Value::Map(m) => serde_json::Value::Object(
                m.borrow()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.json_at(depth + 1)))
                    .collect(),
            ),
        }
    }

    /// Go's notion of true: not the zero value of its type.
    pub fn truth(&self) -> bool {
        match self {
            Value::Missing | Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.borrow().is_empty(),
            Value::Map(m) => !m.borrow().is_empty(),
        }
    }
}

type SharedList = Rc<RefCell<Vec<Value>>>;
type SharedMap = Rc<RefCell<BTreeMap<String, Value>>>;
/// A list or a map made while a template ran (one of the two is empty).
type Made = (
    Weak<RefCell<Vec<Value>>>,
    Weak<RefCell<BTreeMap<String, Value>>>,
);

thread_local! {
    /// Every list and map made while a template runs, so that the cycles `set` can make are broken after.
    static MADE: RefCell<Option<Vec<Made>>> = const { RefCell::new(None) };
}

fn made(l: Option<&SharedList>, m: Option<&SharedMap>) {
    MADE.with(|made| {
        if let Some(v) = made.borrow_mut().as_mut() {
            v.push((
                l.map_or_else(Weak::new, Rc::downgrade),
                m.map_or_else(Weak::new, Rc::downgrade),
            ));
        }
    });
}

pub fn list(v: Vec<Value>) -> Value {
    let l = Rc::new(RefCell::new(v));
    made(Some(&l), None);
    Value::List(l)
}

pub fn map(m: BTreeMap<String, Value>) -> Value {
    let m = Rc::new(RefCell::new(m));
    made(None, Some(&m));
    Value::Map(m)
}

/// While it lives, the lists and maps made on this thread are recorded; dropped, it empties every one still
/// alive, which frees the values a cycle (a map set into itself) would otherwise keep forever.
pub struct Arena {
    outer: Option<Vec<Made>>,
}

impl Arena {
    pub fn open() -> Arena {
        Arena {
            outer: MADE.with(|m| m.borrow_mut().replace(Vec::new())),
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let made = MADE.with(|m| std::mem::replace(&mut *m.borrow_mut(), self.outer.take()));
        for (l, m) in made.unwrap_or_default() {
            // Taken out first, dropped after the borrow ends: dropping may reach this very cell again.
            let list = l.upgrade().map(|l| std::mem::take(&mut *l.borrow_mut()));
            let map = m.upgrade().map(|m| std::mem::take(&mut *m.borrow_mut()));
            drop((list, map));
        }
    }
}

/// A float64 as Go's `%v` prints it (strconv's shortest `%g`): the shortest digits that read back, in `%e` form
/// when the decimal exponent is below -4 or at least 6 (`1e+06`, `1e-05`), else plain (`1500`, `0.25`).
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is a number");
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let point = exp + 1; // digits before the decimal point
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        format!(
            "{}.{}",
            &digits[..point as usize],
            &digits[point as usize..]
        )
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// How deep printing and JSON go into nested values: `set $m "me" $m` makes a map that holds itself, which Go
/// would print until its stack ran out.
const MAX_DEPTH: usize = 64;

fn write_value(v: &Value, f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
    if depth > MAX_DEPTH {
        return f.write_str("...");
    }
    match v {
        Value::Missing => f.write_str("<no value>"),
        Value::Nil => f.write_str("<nil>"),
        Value::Bool(b) => write!(f, "{b}"),
        Value::Int(i) => write!(f, "{i}"),
        Value::Float(x) => f.write_str(&go_float(*x)),
        Value::Str(s) => f.write_str(s),
        Value::List(l) => {
            f.write_str("[")?;
            for (i, v) in l.borrow().iter().enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                // Inside a composite, a nil interface prints as <nil> and a missing one too.
                match v {
                    Value::Missing => f.write_str("<nil>")?,
                    v => write_value(v, f, depth + 1)?,
                }
            }
            f.write_str("]")
        }
        Value::Map(m) => {
            f.write_str("map[")?;
            for (i, (k, v)) in m.borrow().iter().enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                write!(f, "{k}:")?;
                write_value(v, f, depth + 1)?;
            }
            f.write_str("]")
        }
    }
}

/// Go's `fmt.Sprint` of one value (`%v`).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_value(self, f, 0)
    }
}
