//! Go `text/template` source to a tree: the text and `{{ }}` actions (with `{{-`/`-}}` trimming and comments),
//! then pipelines, control structures and `define`d templates. Pure; every error names its line.

use std::collections::BTreeMap;

use super::value::Error;

#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// `.`
    Dot,
    /// `.A.B`
    Field(Vec<String>),
    /// `$x.A.B` (`$` alone is the data the template was run with)
    Var(String, Vec<String>),
    /// A function name.
    Ident(String),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Nil,
    /// `(pipeline).A.B`
    Sub(Box<Pipe>, Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pipe {
    /// Variables declared (`:=`) or assigned (`=`) by the pipeline.
    pub vars: Vec<String>,
    pub declare: bool,
    pub cmds: Vec<Vec<Arg>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Text(String),
    Action(Pipe, usize),
    If(Pipe, Vec<Node>, Vec<Node>, usize),
    Range(Pipe, Vec<Node>, Vec<Node>, usize),
    With(Pipe, Vec<Node>, Vec<Node>, usize),
    Template(String, Option<Pipe>, usize),
    Break(usize),
    Continue(usize),
}

/// A parsed template: its body and the templates it `define`s.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub body: Vec<Node>,
    pub defined: BTreeMap<String, Vec<Node>>,
}

enum Item {
    Text(String),
    Action(String, usize),
}

/// Splits `src` into text and actions, applying trim markers and dropping comments.
fn items(src: &str) -> Result<Vec<Item>, Error> {
    let mut out = Vec::new();
    let mut rest = src;
    let mut line = 1;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = rest[..open].to_owned();
        if trim_next {
            text = text.trim_start().to_owned();
        }
        let after = &rest[open + 2..];
        let left_trim =
            after.starts_with("- ") || after.starts_with("-\t") || after.starts_with("-\n");
        if left_trim {
            text = text.trim_end().to_owned();
        }
        line += rest[..open].matches('\n').count();
        if !text.is_empty() {
            out.push(Item::Text(text));
        }
        let inner_start = if left_trim { 2 } else { 0 };
        let close = action_end(after, line)?;
        let mut inner = &after[inner_start..close];
        trim_next = inner.ends_with(" -") || inner.ends_with("\t-") || inner.ends_with("\n-");
        if trim_next {
            inner = &inner[..inner.len() - 2];
        }
        let trimmed = inner.trim();
        if trimmed.starts_with("/*") {
            if !trimmed.ends_with("*/") {
                return Err(Error::at(line, "unclosed comment"));
            }
        } else {
            out.push(Item::Action(inner.to_owned(), line));
        }
        line += after[..close].matches('\n').count();
        rest = &after[close + 2..];
    }
    let mut text = rest.to_owned();
    if trim_next {
        text = text.trim_start().to_owned();
    }
    if !text.is_empty() {
        out.push(Item::Text(text));
    }
    Ok(out)
}

/// Where the action starting at `s` ends (the index of its `}}`), skipping quoted strings and comments.
fn action_end(s: &str, line: usize) -> Result<usize, Error> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'`' => {
                i += 1;
                while i < b.len() && b[i] != b'`' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => match s[i..].find("*/") {
                Some(e) => i += e + 1,
                None => return Err(Error::at(line, "unclosed comment")),
            },
            b'}' if b.get(i + 1) == Some(&b'}') => return Ok(i),
            _ => {}
        }
        i += 1;
    }
    Err(Error::at(line, "unclosed action"))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Arg(Arg),
    Pipe,
    Open,
    Close,
    Declare,
    Assign,
    Comma,
    /// `.A.B` right after a `)`.
    Chain(Vec<String>),
}

fn fields(s: &str) -> Vec<String> {
    s.split('.')
        .filter(|f| !f.is_empty())
        .map(str::to_owned)
        .collect()
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The tokens of one action's text.
fn tokens(s: &str, line: usize) -> Result<Vec<Tok>, Error> {
    let cs: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let word = |i: &mut usize, ok: &dyn Fn(char) -> bool| {
        let start = *i;
        while *i < cs.len() && ok(cs[*i]) {
            *i += 1;
        }
        cs[start..*i].iter().collect::<String>()
    };
    while i < cs.len() {
        let c = cs[i];
        match c {
            _ if c.is_whitespace() => i += 1,
            '|' => (out.push(Tok::Pipe), i += 1).1,
            '(' => (out.push(Tok::Open), i += 1).1,
            ',' => (out.push(Tok::Comma), i += 1).1,
            ')' => {
                out.push(Tok::Close);
                i += 1;
                // `(…).Field`
                if i < cs.len() && cs[i] == '.' {
                    let chain = word(&mut i, &|c| ident_char(c) || c == '.');
                    out.push(Tok::Chain(fields(&chain)));
                }
            }
            ':' if cs.get(i + 1) == Some(&'=') => (out.push(Tok::Declare), i += 2).1,
            '=' => (out.push(Tok::Assign), i += 1).1,
            '.' => {
                let chain = word(&mut i, &|c| ident_char(c) || c == '.');
                let f = fields(&chain);
                out.push(Tok::Arg(if f.is_empty() {
                    Arg::Dot
                } else {
                    Arg::Field(f)
                }));
            }
            '$' => {
                i += 1;
                let name = word(&mut i, &ident_char);
                let chain = word(&mut i, &|c| ident_char(c) || c == '.');
                out.push(Tok::Arg(Arg::Var(name, fields(&chain))));
            }
            '"' => {
                let start = i;
                i += 1;
                while i < cs.len() && cs[i] != '"' {
                    i += if cs[i] == '\\' { 2 } else { 1 };
                }
                let lit: String = cs[start..=i.min(cs.len() - 1)].iter().collect();
                i += 1;
                let v: String = serde_json::from_str(&lit)
                    .map_err(|_| Error::at(line, &format!("bad string {lit}")))?;
                out.push(Tok::Arg(Arg::Str(v)));
            }
            '`' => {
                i += 1;
                let lit = word(&mut i, &|c| c != '`');
                i += 1;
                out.push(Tok::Arg(Arg::Str(lit)));
            }
            _ if c.is_ascii_digit()
                || (c == '-' && cs.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                i += 1;
                let num =
                    String::from(c) + &word(&mut i, &|c| c.is_ascii_alphanumeric() || c == '.');
                let arg = match num.parse::<i64>() {
                    Ok(n) => Arg::Int(n),
                    Err(_) => Arg::Float(
                        num.parse()
                            .map_err(|_| Error::at(line, &format!("bad number syntax: {num:?}")))?,
                    ),
                };
                out.push(Tok::Arg(arg));
            }
            _ if ident_char(c) => {
                let w = word(&mut i, &ident_char);
                out.push(Tok::Arg(match w.as_str() {
                    "true" => Arg::Bool(true),
                    "false" => Arg::Bool(false),
                    "nil" => Arg::Nil,
                    _ => Arg::Ident(w),
                }));
            }
            _ => return Err(Error::at(line, &format!("unexpected {c:?} in action"))),
        }
    }
    Ok(out)
}

/// A pipeline from tokens: `[$a[, $b] :=|=] cmd [| cmd]…`.
fn pipe(toks: &[Tok], line: usize) -> Result<Pipe, Error> {
    let mut vars = Vec::new();
    let mut declare = true;
    let mut rest = toks;
    let assign_at = toks
        .iter()
        .position(|t| matches!(t, Tok::Declare | Tok::Assign));
    if let Some(k) = assign_at {
        let head = &toks[..k];
        let all_vars = head
            .iter()
            .all(|t| matches!(t, Tok::Arg(Arg::Var(_, f)) if f.is_empty()) || *t == Tok::Comma);
        if all_vars && !head.is_empty() {
            for t in head {
                if let Tok::Arg(Arg::Var(n, _)) = t {
                    vars.push(n.clone());
                }
            }
            declare = toks[k] == Tok::Declare;
            rest = &toks[k + 1..];
        }
    }
    let mut cmds = Vec::new();
    let mut cmd = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        match &rest[i] {
            Tok::Pipe => cmds.push(std::mem::take(&mut cmd)),
            Tok::Arg(a) => cmd.push(a.clone()),
            Tok::Open => {
                let mut depth = 1;
                let start = i + 1;
                while depth > 0 {
                    i += 1;
                    match rest.get(i) {
                        Some(Tok::Open) => depth += 1,
                        Some(Tok::Close) => depth -= 1,
                        None => return Err(Error::at(line, "unclosed left paren")),
                        _ => {}
                    }
                }
                let inner = pipe(&rest[start..i], line)?;
                let mut chain = Vec::new();
                if let Some(Tok::Chain(f)) = rest.get(i + 1) {
                    chain = f.clone();
                    i += 1;
                }
                cmd.push(Arg::Sub(Box::new(inner), chain));
            }
            t => return Err(Error::at(line, &format!("unexpected {t:?} in pipeline"))),
        }
        i += 1;
    }
    cmds.push(cmd);
    if cmds.iter().any(Vec::is_empty) {
        return Err(Error::at(line, "missing value for command"));
    }
    Ok(Pipe {
        vars,
        declare,
        cmds,
    })
}

/// What ended a list of nodes.
enum Stop {
    Eof,
    /// `{{ end }}`
    Finish,
    Else(String, usize),
}

struct Parser {
    items: std::vec::IntoIter<Item>,
    defined: BTreeMap<String, Vec<Node>>,
}

impl Parser {
    fn list(&mut self) -> Result<(Vec<Node>, Stop), Error> {
        let mut nodes = Vec::new();
        while let Some(item) = self.items.next() {
            let (text, line) = match item {
                Item::Text(t) => {
                    nodes.push(Node::Text(t));
                    continue;
                }
                Item::Action(a, line) => (a, line),
            };
            let toks = tokens(&text, line)?;
            let keyword = match toks.first() {
                Some(Tok::Arg(Arg::Ident(k))) => k.as_str(),
                _ => "",
            };
            let rest = toks.get(1..).unwrap_or_default();
            match keyword {
                "end" => return Ok((nodes, Stop::Finish)),
                "else" => return Ok((nodes, Stop::Else(text.trim()[4..].trim().to_owned(), line))),
                "if" | "range" | "with" => {
                    nodes.push(self.control(keyword, pipe(rest, line)?, line)?)
                }
                "break" => nodes.push(Node::Break(line)),
                "continue" => nodes.push(Node::Continue(line)),
                "define" | "block" | "template" => {
                    let Some(Tok::Arg(Arg::Str(name))) = rest.first() else {
                        return Err(Error::at(
                            line,
                            &format!("{keyword}: a quoted name is needed"),
                        ));
                    };
                    let arg = (rest.len() > 1)
                        .then(|| pipe(&rest[1..], line))
                        .transpose()?;
                    if keyword != "template" {
                        let (body, end) = self.list()?;
                        if !matches!(end, Stop::Finish) {
                            return Err(Error::at(line, &format!("{keyword} {name:?} has no end")));
                        }
                        self.defined.insert(name.clone(), body);
                    }
                    if keyword != "define" {
                        nodes.push(Node::Template(name.clone(), arg, line));
                    }
                }
                _ => nodes.push(Node::Action(pipe(&toks, line)?, line)),
            }
        }
        Ok((nodes, Stop::Eof))
    }

    /// `if`/`range`/`with` up to its `end`, with `else` and `else if`/`else with`.
    fn control(&mut self, keyword: &str, p: Pipe, line: usize) -> Result<Node, Error> {
        let (body, end) = self.list()?;
        let otherwise = match end {
            Stop::Finish => Vec::new(),
            Stop::Eof => return Err(Error::at(line, &format!("unexpected EOF in {keyword}"))),
            Stop::Else(rest, l) if rest.is_empty() => match self.list()? {
                (e, Stop::Finish) => e,
                _ => return Err(Error::at(l, "expected end after else")),
            },
            Stop::Else(rest, l) => {
                let toks = tokens(&rest, l)?;
                match toks.first() {
                    Some(Tok::Arg(Arg::Ident(k))) if k == "if" || k == "with" => {
                        let k = k.clone();
                        vec![self.control(&k, pipe(&toks[1..], l)?, l)?]
                    }
                    _ => return Err(Error::at(l, &format!("unexpected {rest:?} after else"))),
                }
            }
        };
        Ok(match keyword {
            "if" => Node::If(p, body, otherwise, line),
            "range" => Node::Range(p, body, otherwise, line),
            _ => Node::With(p, body, otherwise, line),
        })
    }
}

/// Parses `src`; `known` says whether a name is a function.
pub fn parse(src: &str, known: &dyn Fn(&str) -> bool) -> Result<Tree, Error> {
    let mut p = Parser {
        items: items(src)?.into_iter(),
        defined: BTreeMap::new(),
    };
    let (body, end) = p.list()?;
    if !matches!(end, Stop::Eof) {
        return Err(Error::msg("unexpected end or else"));
    }
    let tree = Tree {
        body,
        defined: p.defined,
    };
    let mut unknown = None;
    visit(&tree, &mut |a| {
        if let Arg::Ident(f) = a {
            if !known(f) && unknown.is_none() {
                unknown = Some(f.clone());
            }
        }
    });
    match unknown {
        Some(f) => Err(Error::msg(&format!("function {f:?} not defined"))),
        None => Ok(tree),
    }
}

fn visit(tree: &Tree, f: &mut dyn FnMut(&Arg)) {
    fn pipe(p: &Pipe, f: &mut dyn FnMut(&Arg)) {
        for a in p.cmds.iter().flatten() {
            f(a);
            if let Arg::Sub(inner, _) = a {
                pipe(inner, f);
            }
        }
    }
    fn nodes(ns: &[Node], f: &mut dyn FnMut(&Arg)) {
        for n in ns {
            match n {
                Node::Action(p, _) => pipe(p, f),
                Node::If(p, a, b, _) | Node::Range(p, a, b, _) | Node::With(p, a, b, _) => {
                    pipe(p, f);
                    nodes(a, f);
                    nodes(b, f);
                }
                Node::Template(_, Some(p), _) => pipe(p, f),
                _ => {}
            }
        }
    }
    nodes(&tree.body, f);
    for body in tree.defined.values() {
        nodes(body, f);
    }
}
