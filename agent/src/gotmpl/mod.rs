//! Go's `text/template` with the sprig functions Airship's templates use, over JSON data: what ViNO's
//! networkData templates are written in. Values behave as Go's do when the data is JSON decoded into
//! `interface{}`: maps are shared (sprig's `set` changes the map every variable holding it sees), a missing
//! key is `<no value>`, numbers from the data are float64 and print as Go prints them. Pure: no I/O.
//!
//! Why our own: the Rust implementations of Go templates (gtmpl, lithos-gotmpl) copy maps on every call, so
//! `{{ $_ := set $m "k" "v" }}` leaves `$m` unchanged there, and Airship's templates depend on it.

mod exec;
mod funcs;
mod parse;
mod value;

pub use self::value::{go_float, list, map, Error, Value};

/// Whether `text` is written in Go's template language rather than minijinja: it has no `{% %}` block and an
/// action that starts, after `{{` and an optional trim marker, with `.`, `$`, a comment or a Go keyword.
pub fn is_go_template(text: &str) -> bool {
    if text.contains("{%") {
        return false;
    }
    text.split("{{").skip(1).any(|a| {
        let a = a.strip_prefix('-').unwrap_or(a).trim_start();
        a.starts_with('.')
            || a.starts_with('$')
            || a.starts_with("/*")
            || [
                "range ",
                "if ",
                "with ",
                "define ",
                "template ",
                "block ",
                "end",
            ]
            .iter()
            .any(|k| a.starts_with(k))
    })
}

/// Renders `src` with `data` as `.`, as Go's `template.New(..).Funcs(sprig.TxtFuncMap()).Parse(src)` then
/// `Execute(data)` would.
pub fn render(src: &str, data: &serde_json::Value) -> Result<String, Error> {
    let tree = parse::parse(src, &funcs::exists)?;
    let _arena = value::Arena::open();
    exec::run(&tree, Value::from_json(data))
}

#[cfg(test)]
mod tests;
