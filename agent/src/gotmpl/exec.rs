//! Running a parsed template: `.` and variables, pipelines, `if`/`range`/`with`, `template`, `break` and
//! `continue`, as Go's text/template/exec does.

use super::funcs;
use super::parse::{Arg, Node, Pipe, Tree};
use super::value::{Error, Value};

enum Flow {
    Normal,
    Break,
    Continue,
}

/// How much a template may do: a Secret's template must not hang or swamp the reconciler.
const MAX_OUTPUT: usize = 1 << 20;
const MAX_STEPS: usize = 1_000_000;

struct State<'a> {
    tree: &'a Tree,
    out: String,
    steps: usize,
    /// Variables in scope, innermost last; `$` first.
    vars: Vec<(String, Value)>,
    depth: usize,
}

pub fn run(tree: &Tree, data: Value) -> Result<String, Error> {
    let mut s = State {
        tree,
        out: String::new(),
        steps: 0,
        vars: vec![(String::new(), data.clone())],
        depth: 0,
    };
    s.walk(&tree.body, &data)?;
    Ok(s.out)
}

/// `.A.B` of `v`: a map's key (missing: `<no value>`), an error on anything else.
fn field(v: &Value, chain: &[String], line: usize) -> Result<Value, Error> {
    let mut v = v.clone();
    for f in chain {
        v = match &v {
            Value::Map(m) => m.borrow().get(f).cloned().unwrap_or(Value::Missing),
            Value::Missing => Value::Missing,
            Value::Nil => {
                return Err(Error::at(
                    line,
                    &format!("nil pointer evaluating interface {{}}.{f}"),
                ))
            }
            other => {
                return Err(Error::at(
                    line,
                    &format!(
                        "can't evaluate field {f} in type {}",
                        funcs::type_name(other)
                    ),
                ))
            }
        };
    }
    Ok(v)
}

impl State<'_> {
    fn var(&self, name: &str, line: usize) -> Result<Value, Error> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Error::at(line, &format!("undefined variable: ${name}")))
    }

    fn walk(&mut self, nodes: &[Node], dot: &Value) -> Result<Flow, Error> {
        for n in nodes {
            match self.node(n, dot)? {
                Flow::Normal => {}
                other => return Ok(other),
            }
        }
        Ok(Flow::Normal)
    }

    /// Runs `body` in a scope of its own: variables declared in it end with it.
    fn scoped(&mut self, body: &[Node], dot: &Value) -> Result<Flow, Error> {
        let mark = self.vars.len();
        let flow = self.walk(body, dot);
        self.vars.truncate(mark);
        flow
    }

    fn node(&mut self, n: &Node, dot: &Value) -> Result<Flow, Error> {
        self.steps += 1;
        if self.steps > MAX_STEPS || self.out.len() > MAX_OUTPUT {
            return Err(Error::msg(&format!(
                "over the limit of {MAX_STEPS} steps or {MAX_OUTPUT} bytes of output"
            )));
        }
        match n {
            Node::Text(t) => self.out.push_str(t),
            Node::Action(p, line) => {
                let v = self.pipe(p, dot, *line)?;
                if p.vars.is_empty() {
                    // An action's value that is a nil interface, or none at all, prints as no value.
                    match v {
                        Value::Missing | Value::Nil => self.out.push_str("<no value>"),
                        v => self.out.push_str(&v.to_string()),
                    }
                }
            }
            Node::If(p, then, otherwise, line) => {
                let mark = self.vars.len();
                let v = self.pipe(p, dot, *line)?;
                let flow = if v.truth() {
                    self.scoped(then, dot)
                } else {
                    self.scoped(otherwise, dot)
                };
                self.vars.truncate(mark);
                return flow;
            }
            Node::With(p, body, otherwise, line) => {
                let mark = self.vars.len();
                let v = self.pipe(p, dot, *line)?;
                let flow = if v.truth() {
                    self.scoped(body, &v)
                } else {
                    self.scoped(otherwise, dot)
                };
                self.vars.truncate(mark);
                return flow;
            }
            Node::Range(p, body, otherwise, line) => {
                return self.range(p, body, otherwise, dot, *line)
            }
            Node::Template(name, arg, line) => {
                let body = self
                    .tree
                    .defined
                    .get(name)
                    .ok_or_else(|| Error::at(*line, &format!("no such template {name:?}")))?;
                let v = match arg {
                    Some(p) => self.pipe(p, dot, *line)?,
                    None => Value::Nil,
                };
                self.depth += 1;
                if self.depth > 100 {
                    return Err(Error::at(*line, "exceeded maximum template depth (100)"));
                }
                // A template sees only `$` (its argument) and its own variables.
                let saved = std::mem::replace(&mut self.vars, vec![(String::new(), v.clone())]);
                let r = self.walk(body, &v);
                self.vars = saved;
                self.depth -= 1;
                r?;
            }
            Node::Break(_) => return Ok(Flow::Break),
            Node::Continue(_) => return Ok(Flow::Continue),
        }
        Ok(Flow::Normal)
    }

    fn range(
        &mut self,
        p: &Pipe,
        body: &[Node],
        otherwise: &[Node],
        dot: &Value,
        line: usize,
    ) -> Result<Flow, Error> {
        let mark = self.vars.len();
        // The variables name the key and element, not the whole value.
        let bare = Pipe {
            vars: Vec::new(),
            declare: true,
            cmds: p.cmds.clone(),
        };
        let v = self.pipe(&bare, dot, line)?;
        let entries: Vec<(Value, Value)> = match &v {
            Value::List(l) => l
                .borrow()
                .iter()
                .enumerate()
                .map(|(i, e)| (Value::Int(i as i64), e.clone()))
                .collect(),
            // Go ranges over a map in key order.
            Value::Map(m) => m
                .borrow()
                .iter()
                .map(|(k, e)| (Value::Str(k.clone()), e.clone()))
                .collect(),
            Value::Int(n) if *n > MAX_STEPS as i64 => {
                return Err(Error::at(
                    line,
                    &format!("range over {n}: over the limit of {MAX_STEPS} steps"),
                ))
            }
            Value::Int(_) if p.vars.len() > 1 => {
                return Err(Error::at(
                    line,
                    "can't use a second variable with an integer range",
                ))
            }
            Value::Int(n) => (0..*n).map(|i| (Value::Int(i), Value::Int(i))).collect(),
            Value::Missing | Value::Nil => Vec::new(),
            other => {
                return Err(Error::at(
                    line,
                    &format!("range can't iterate over {other}"),
                ))
            }
        };
        if entries.is_empty() {
            let flow = self.scoped(otherwise, dot);
            self.vars.truncate(mark);
            return flow.map(|_| Flow::Normal);
        }
        for (k, e) in entries {
            let inner = self.vars.len();
            match p.vars.as_slice() {
                [] => {}
                [only] => self.vars.push((only.clone(), e.clone())),
                [key, elem, ..] => {
                    self.vars.push((key.clone(), k));
                    self.vars.push((elem.clone(), e.clone()));
                }
            }
            let flow = self.scoped(body, &e);
            self.vars.truncate(inner);
            if let Flow::Break = flow? {
                break;
            }
        }
        self.vars.truncate(mark);
        Ok(Flow::Normal)
    }

    /// Evaluates a pipeline; declares or assigns its variables.
    fn pipe(&mut self, p: &Pipe, dot: &Value, line: usize) -> Result<Value, Error> {
        let mut last: Option<Value> = None;
        for cmd in &p.cmds {
            last = Some(self.command(cmd, dot, last, line)?);
        }
        let v = last.unwrap_or(Value::Missing);
        for name in &p.vars {
            if p.declare {
                self.vars.push((name.clone(), v.clone()));
            } else {
                let slot = self
                    .vars
                    .iter_mut()
                    .rev()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| Error::at(line, &format!("undefined variable: ${name}")))?;
                slot.1 = v.clone();
            }
        }
        Ok(v)
    }

    fn arg(&mut self, a: &Arg, dot: &Value, line: usize) -> Result<Value, Error> {
        Ok(match a {
            Arg::Dot => dot.clone(),
            Arg::Field(chain) => field(dot, chain, line)?,
            Arg::Var(name, chain) => field(&self.var(name, line)?, chain, line)?,
            Arg::Str(s) => Value::Str(s.clone()),
            Arg::Int(i) => Value::Int(*i),
            Arg::Float(f) => Value::Float(*f),
            Arg::Bool(b) => Value::Bool(*b),
            Arg::Nil => Value::Nil,
            Arg::Sub(p, chain) => field(&self.pipe(p, dot, line)?, chain, line)?,
            Arg::Ident(f) => self.call(f, &[], dot, None, line)?,
        })
    }

    /// One command of a pipeline: a function call (with the previous command's value as its last argument) or
    /// a single value.
    fn command(
        &mut self,
        cmd: &[Arg],
        dot: &Value,
        piped: Option<Value>,
        line: usize,
    ) -> Result<Value, Error> {
        match &cmd[0] {
            Arg::Ident(f) => self.call(f, &cmd[1..], dot, piped, line),
            Arg::Nil => Err(Error::at(line, "nil is not a command")),
            first if cmd.len() == 1 && piped.is_none() => self.arg(first, dot, line),
            _ => Err(Error::at(line, "can't give arguments to a non-function")),
        }
    }

    fn call(
        &mut self,
        name: &str,
        args: &[Arg],
        dot: &Value,
        piped: Option<Value>,
        line: usize,
    ) -> Result<Value, Error> {
        // `and` and `or` stop at the first argument that decides.
        if name == "and" || name == "or" {
            let mut last = Value::Missing;
            let n = args.len() + usize::from(piped.is_some());
            if n == 0 {
                return Err(Error::at(
                    line,
                    &format!("wrong number of args for {name}: want at least 1 got 0"),
                ));
            }
            for a in args {
                last = self.arg(a, dot, line)?;
                if last.truth() == (name == "or") {
                    return Ok(last);
                }
            }
            return Ok(piped.unwrap_or(last));
        }
        let mut values = Vec::with_capacity(args.len() + 1);
        for a in args {
            values.push(self.arg(a, dot, line)?);
        }
        values.extend(piped);
        // Go passes a missing value to a function's interface{} parameter as nil; its builtins that take
        // reflect.Values see it as it is.
        if !matches!(
            name,
            "not" | "len" | "index" | "eq" | "ne" | "lt" | "le" | "gt" | "ge"
        ) {
            for v in &mut values {
                if let Value::Missing = v {
                    *v = Value::Nil;
                }
            }
        }
        funcs::call(name, &values)
            .map_err(|e| Error::at(line, &format!("error calling {name}: {e}")))
    }
}
