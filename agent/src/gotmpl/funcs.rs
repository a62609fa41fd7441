//! The functions a template can call: Go's builtins and the sprig functions networkData templates use. A name
//! not here is refused when the template is parsed, as Go refuses a function not in its FuncMap.

use std::collections::BTreeMap;

use super::value::{list, map, Value};

const NAMES: &[&str] = &[
    // text/template
    "and",
    "or",
    "not",
    "len",
    "index",
    "print",
    "printf",
    "println",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    // sprig
    "dict",
    "set",
    "unset",
    "hasKey",
    "get",
    "list",
    "append",
    "first",
    "last",
    "default",
    "empty",
    "coalesce",
    "ternary",
    "join",
    "splitList",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "upper",
    "lower",
    "replace",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "quote",
    "squote",
    "indent",
    "nindent",
    "toString",
    "int",
    "int64",
    "float64",
    "add",
    "sub",
    "mul",
    "div",
    "mod",
    "add1",
    "toJson",
    "b64enc",
    "b64dec",
];

pub fn exists(name: &str) -> bool {
    NAMES.contains(&name)
}

/// Go's name for the type of `v` in error messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Missing | Value::Nil => "interface {}",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float64",
        Value::Str(_) => "string",
        Value::List(_) => "[]interface {}",
        Value::Map(_) => "map[string]interface {}",
    }
}

fn want(args: &[Value], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("wrong number of args: want {n} got {}", args.len()))
    }
}

fn string(v: &Value) -> String {
    match v {
        Value::Missing | Value::Nil => String::new(),
        v => v.to_string(),
    }
}

fn number(v: &Value) -> Result<f64, String> {
    match v {
        Value::Int(i) => Ok(*i as f64),
        Value::Float(f) => Ok(*f),
        Value::Str(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a number")),
        Value::Bool(b) => Ok(f64::from(u8::from(*b))),
        Value::Missing | Value::Nil => Ok(0.0),
        other => Err(format!("{} is not a number", type_name(other))),
    }
}

/// sprig's `toInt64`: the integer part.
fn int(v: &Value) -> Result<i64, String> {
    Ok(match v {
        Value::Int(i) => *i,
        other => number(other)? as i64,
    })
}

/// text/template's comparison: like values by kind; an int and a float64 are not comparable.
fn compare(a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    use std::cmp::Ordering;
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y).ok_or_else(|| "NaN".to_owned()),
        (Value::Str(x), Value::Str(y)) => Ok(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Ok(x.cmp(y)),
        (Value::Nil | Value::Missing, Value::Nil | Value::Missing) => Ok(Ordering::Equal),
        _ => Err("incompatible types for comparison".to_owned()),
    }
}

fn equal(a: &Value, b: &Value) -> Result<bool, String> {
    match (a, b) {
        (Value::List(_) | Value::Map(_), _) | (_, Value::List(_) | Value::Map(_)) => {
            Err("non-comparable type".to_owned())
        }
        (Value::Nil | Value::Missing, _) | (_, Value::Nil | Value::Missing) => Ok(matches!(
            (a, b),
            (Value::Nil | Value::Missing, Value::Nil | Value::Missing)
        )),
        _ => compare(a, b).map(|o| o.is_eq()),
    }
}

/// `fmt.Sprint`: a space between two operands when neither is a string.
fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !matches!(a, Value::Str(_)) && !matches!(args[i - 1], Value::Str(_)) {
            out.push(' ');
        }
        out.push_str(&a.to_string());
    }
    out
}

/// `fmt.Sprintf` for the verbs templates use: `%s %v %d %q %f %t %%`.
fn sprintf(format: &str, args: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let verb = chars.next().ok_or("a % at the end of the format")?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(a) = args.next() else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        match verb {
            'v' => out.push_str(&a.to_string()),
            's' => match a {
                Value::Str(x) => out.push_str(x),
                Value::List(_) | Value::Map(_) => out.push_str(&a.to_string()),
                Value::Missing | Value::Nil => out.push_str("%!s(<nil>)"),
                other => out.push_str(&format!("%!s({}={other})", type_name(other))),
            },
            'd' => match a {
                Value::Int(i) => out.push_str(&i.to_string()),
                other => out.push_str(&format!("%!d({}={other})", type_name(other))),
            },
            'q' => out.push_str(&quoted(a)),
            'f' => out.push_str(&format!("{:.6}", number(a)?)),
            't' => out.push_str(&a.to_string()),
            other => return Err(format!("format verb %{other} is not supported")),
        }
    }
    Ok(out)
}

/// `%q`: a string quoted, a list element by element.
fn quoted(v: &Value) -> String {
    match v {
        Value::Str(x) => serde_json::to_string(x).expect("a string serializes"),
        Value::List(l) => format!(
            "[{}]",
            l.borrow().iter().map(quoted).collect::<Vec<_>>().join(" ")
        ),
        Value::Missing | Value::Nil => "%!q(<nil>)".to_owned(),
        other => format!("%!q({}={other})", type_name(other)),
    }
}

fn index(args: &[Value]) -> Result<Value, String> {
    let (first, keys) = args
        .split_first()
        .ok_or("wrong number of args: want at least 1 got 0")?;
    let mut v = first.clone();
    for k in keys {
        v = match (&v, k) {
            // A missing key gives the element type's zero value, a nil interface.
            (Value::Map(m), k) => m.borrow().get(&string(k)).cloned().unwrap_or(Value::Nil),
            (Value::List(l), k) => {
                let i = int(k)?;
                let l = l.borrow();
                usize::try_from(i)
                    .ok()
                    .and_then(|i| l.get(i).cloned())
                    .ok_or_else(|| format!("index out of range: {i}"))?
            }
            (Value::Missing | Value::Nil, _) => return Err("index of untyped nil".to_owned()),
            (other, _) => return Err(format!("can't index item of type {}", type_name(other))),
        };
    }
    Ok(v)
}

fn the_map(
    name: &str,
    v: &Value,
) -> Result<std::rc::Rc<std::cell::RefCell<BTreeMap<String, Value>>>, String> {
    match v {
        Value::Map(m) => Ok(m.clone()),
        other => Err(format!("{name}: {} is not a dict", type_name(other))),
    }
}

fn items(v: &Value) -> Vec<Value> {
    match v {
        Value::List(l) => l.borrow().clone(),
        Value::Missing | Value::Nil => Vec::new(),
        other => vec![other.clone()],
    }
}

fn indent(n: &Value, s: &Value) -> Result<String, String> {
    let pad = " ".repeat(usize::try_from(int(n)?).unwrap_or(0));
    Ok(string(s)
        .split('\n')
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n"))
}

fn arith(args: &[Value], f: fn(i64, i64) -> Option<i64>) -> Result<Value, String> {
    want(args, 2)?;
    f(int(&args[0])?, int(&args[1])?)
        .map(Value::Int)
        .ok_or_else(|| "arithmetic overflow or division by zero".to_owned())
}

/// A Go parameter's type, where a function has typed parameters.
#[derive(Clone, Copy)]
enum Param {
    Str,
    Int,
    Bool,
    Map,
    List,
    Any,
}

/// The typed parameters of the functions that have them: Go refuses an argument of another type (and nil)
/// rather than converting it.
fn params(name: &str) -> Option<&'static [Param]> {
    use Param::*;
    Some(match name {
        "upper" | "lower" | "trim" | "b64enc" | "b64dec" => &[Str],
        "trimPrefix" | "trimSuffix" | "contains" | "hasPrefix" | "hasSuffix" | "splitList" => {
            &[Str, Str]
        }
        "replace" => &[Str, Str, Str],
        "indent" | "nindent" => &[Int, Str],
        "join" => &[Str, Any],
        "set" => &[Map, Str, Any],
        "unset" | "hasKey" => &[Map, Str],
        "ternary" => &[Any, Any, Bool],
        "first" | "last" => &[List],
        _ => return None,
    })
}

fn check(name: &str, a: &[Value]) -> Result<(), String> {
    if name == "printf" {
        return match a.first() {
            Some(Value::Str(_)) => Ok(()),
            Some(other) => Err(format!(
                "wrong type for value; expected string; got {}",
                type_name(other)
            )),
            None => Err("wrong number of args: want at least 1 got 0".to_owned()),
        };
    }
    let Some(ps) = params(name) else {
        return Ok(());
    };
    want(a, ps.len())?;
    for (p, v) in ps.iter().zip(a) {
        let ok = matches!(
            (p, v),
            (Param::Any, _)
                | (Param::Str, Value::Str(_))
                | (Param::Int, Value::Int(_))
                | (Param::Bool, Value::Bool(_))
                | (Param::Map, Value::Map(_))
                | (Param::List, Value::List(_))
        );
        if !ok {
            return Err(match v {
                Value::Missing | Value::Nil => {
                    "invalid value; expected a value of the parameter's type".to_owned()
                }
                other => format!("wrong type for value; got {}", type_name(other)),
            });
        }
    }
    Ok(())
}

pub fn call(name: &str, a: &[Value]) -> Result<Value, String> {
    check(name, a)?;
    let s = |i: usize| a.get(i).map(string).unwrap_or_default();
    Ok(match name {
        "not" => {
            want(a, 1)?;
            Value::Bool(!a[0].truth())
        }
        "len" => {
            want(a, 1)?;
            Value::Int(match &a[0] {
                Value::Str(x) => x.len(),
                Value::List(l) => l.borrow().len(),
                Value::Map(m) => m.borrow().len(),
                other => return Err(format!("len of type {}", type_name(other))),
            } as i64)
        }
        "index" => index(a)?,
        "print" => Value::Str(sprint(a)),
        "println" => Value::Str(
            a.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
                + "\n",
        ),
        "printf" => Value::Str(sprintf(&s(0), a.get(1..).unwrap_or_default())?),
        "eq" => {
            let (first, rest) = a.split_first().ok_or("missing argument for comparison")?;
            let mut hit = false;
            for b in rest {
                hit |= equal(first, b)?;
            }
            Value::Bool(hit)
        }
        "ne" => {
            want(a, 2)?;
            Value::Bool(!equal(&a[0], &a[1])?)
        }
        "lt" | "le" | "gt" | "ge" => {
            want(a, 2)?;
            let o = compare(&a[0], &a[1])?;
            Value::Bool(match name {
                "lt" => o.is_lt(),
                "le" => o.is_le(),
                "gt" => o.is_gt(),
                _ => o.is_ge(),
            })
        }
        "dict" => {
            let mut m = BTreeMap::new();
            for pair in a.chunks(2) {
                m.insert(
                    string(&pair[0]),
                    pair.get(1).cloned().unwrap_or(Value::Str(String::new())),
                );
            }
            map(m)
        }
        "set" => {
            want(a, 3)?;
            the_map("set", &a[0])?
                .borrow_mut()
                .insert(s(1), a[2].clone());
            a[0].clone()
        }
        "unset" => {
            want(a, 2)?;
            the_map("unset", &a[0])?.borrow_mut().remove(&s(1));
            a[0].clone()
        }
        "hasKey" => {
            want(a, 2)?;
            Value::Bool(the_map("hasKey", &a[0])?.borrow().contains_key(&s(1)))
        }
        "list" => list(a.to_vec()),
        "append" => {
            want(a, 2)?;
            let mut l = items(&a[0]);
            l.push(a[1].clone());
            list(l)
        }
        "first" => items(a.first().ok_or("first: no list")?)
            .first()
            .cloned()
            .unwrap_or(Value::Nil),
        "last" => items(a.first().ok_or("last: no list")?)
            .last()
            .cloned()
            .unwrap_or(Value::Nil),
        // `default d v`: v unless it is empty.
        "default" => match a {
            [d] => d.clone(),
            [d, v] if !v.truth() => d.clone(),
            [_, v] => v.clone(),
            _ => return Err(format!("wrong number of args: want 1 or 2 got {}", a.len())),
        },
        "empty" => {
            want(a, 1)?;
            Value::Bool(!a[0].truth())
        }
        "coalesce" => a.iter().find(|v| v.truth()).cloned().unwrap_or(Value::Nil),
        "ternary" => {
            want(a, 3)?;
            if a[2].truth() {
                a[0].clone()
            } else {
                a[1].clone()
            }
        }
        "join" => {
            want(a, 2)?;
            Value::Str(
                items(&a[1])
                    .iter()
                    .map(string)
                    .collect::<Vec<_>>()
                    .join(&s(0)),
            )
        }
        "splitList" => list(
            s(1).split(&s(0))
                .map(|p| Value::Str(p.to_owned()))
                .collect(),
        ),
        "trim" => Value::Str(s(0).trim().to_owned()),
        "trimPrefix" => Value::Str(s(1).strip_prefix(&s(0)).map_or_else(|| s(1), str::to_owned)),
        "trimSuffix" => Value::Str(s(1).strip_suffix(&s(0)).map_or_else(|| s(1), str::to_owned)),
        "upper" => Value::Str(s(0).to_uppercase()),
        "lower" => Value::Str(s(0).to_lowercase()),
        "replace" => Value::Str(s(2).replace(&s(0), &s(1))),
        "contains" => Value::Bool(s(1).contains(&s(0))),
        "hasPrefix" => Value::Bool(s(1).starts_with(&s(0))),
        "hasSuffix" => Value::Bool(s(1).ends_with(&s(0))),
        "quote" => Value::Str(
            a.iter()
                .filter(|v| !matches!(v, Value::Nil | Value::Missing))
                .map(|v| serde_json::to_string(&string(v)).expect("a string serializes"))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "squote" => Value::Str(
            a.iter()
                .filter(|v| !matches!(v, Value::Nil | Value::Missing))
                .map(|v| format!("'{}'", string(v)))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "indent" => {
            want(a, 2)?;
            Value::Str(indent(&a[0], &a[1])?)
        }
        "nindent" => {
            want(a, 2)?;
            Value::Str(format!("\n{}", indent(&a[0], &a[1])?))
        }
        "toString" => Value::Str(s(0)),
        "int" | "int64" => Value::Int(int(a.first().unwrap_or(&Value::Nil))?),
        "float64" => Value::Float(number(a.first().unwrap_or(&Value::Nil))?),
        "add" => Value::Int(a.iter().map(int).sum::<Result<i64, String>>()?),
        "add1" => Value::Int(int(a.first().unwrap_or(&Value::Nil))? + 1),
        "sub" => arith(a, i64::checked_sub)?,
        "mul" => arith(a, i64::checked_mul)?,
        "div" => arith(a, i64::checked_div)?,
        "mod" => arith(a, i64::checked_rem)?,
        "toJson" => Value::Str(
            a.first()
                .map_or(serde_json::Value::Null, Value::to_json)
                .to_string(),
        ),
        "b64enc" => {
            use base64::Engine as _;
            Value::Str(base64::engine::general_purpose::STANDARD.encode(s(0)))
        }
        "b64dec" => {
            use base64::Engine as _;
            match base64::engine::general_purpose::STANDARD.decode(s(0)) {
                Ok(b) => Value::Str(String::from_utf8_lossy(&b).into_owned()),
                Err(e) => Value::Str(e.to_string()),
            }
        }
        other => return Err(format!("function {other:?} not defined")),
    })
}
