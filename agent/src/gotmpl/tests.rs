//! Go text/template's behaviour, case by case, as Go 1.x prints it.

use serde_json::json;

use super::*;

fn r(src: &str, data: serde_json::Value) -> String {
    render(src, &data).unwrap_or_else(|e| panic!("{src:?}: {e}"))
}

#[test]
fn sprigs_set_changes_the_map_every_variable_holding_it_sees() {
    assert_eq!(
        r(
            r#"{{ $m := dict }}{{ $_ := set $m "a" "1" }}{{ $n := $m }}{{ $_ := set $n "b" 2 }}{{ index $m "a" }} {{ len $m }} {{ $m }}"#,
            json!({})
        ),
        "1 2 map[a:1 b:2]"
    );
}

#[test]
fn trim_markers_and_comments() {
    assert_eq!(r("a  {{- 1 -}}  b", json!({})), "a1b");
    assert_eq!(r("a {{/* no */}} b", json!({})), "a  b");
    assert_eq!(r("a\n  {{- /* gone */ -}}\n  b", json!({})), "ab");
    // `{{-3}}` is the number -3, not a trim marker.
    assert_eq!(r("a {{-3}}", json!({})), "a -3");
}

#[test]
fn missing_keys_and_nil_print_no_value() {
    assert_eq!(r("{{ .nope }}", json!({})), "<no value>");
    assert_eq!(r("{{ .a.b.c }}", json!({})), "<no value>");
    assert_eq!(r(r#"{{ index . "nope" }}"#, json!({})), "<no value>");
    assert_eq!(r("{{ .n }}", json!({"n": null})), "<no value>");
    // Given to a function, a missing value is nil.
    assert_eq!(
        r(
            "{{ print .nope }}|{{ .nope | quote }}|{{ eq .nope \"x\" }}",
            json!({})
        ),
        "<nil>||false"
    );
    assert!(render("{{ .n.x }}", &json!({"n": null}))
        .unwrap_err()
        .to_string()
        .contains("nil pointer evaluating interface {}.x"));
}

#[test]
fn numbers_from_data_are_float64_and_print_as_go_prints_them() {
    let data =
        json!({"mtu": 1500, "big": 1000000, "n": 123456, "q": 0.25, "tiny": 0.00001, "neg": -2.5});
    assert_eq!(
        r(
            "{{ .mtu }} {{ .big }} {{ .n }} {{ .q }} {{ .tiny }} {{ .neg }}",
            data
        ),
        "1500 1e+06 123456 0.25 1e-05 -2.5"
    );
    assert_eq!(go_float(1.234567e7), "1.234567e+07");
    assert_eq!(go_float(0.0001), "0.0001");
}

#[test]
fn lists_and_maps_print_as_fmt_prints_them() {
    assert_eq!(
        r(
            "{{ .dns }} {{ .m }} {{ .e }}",
            json!({"dns": ["10.0.0.1", "10.0.0.2"], "m": {"b": true, "a": [1, "x"]}, "e": []})
        ),
        "[10.0.0.1 10.0.0.2] map[a:[1 x] b:true] []"
    );
}

#[test]
fn range_over_lists_and_maps_in_key_order_with_else_break_and_continue() {
    let data = json!({"l": ["a", "b", "c"], "m": {"z": 1, "a": 2}, "none": []});
    assert_eq!(
        r(
            "{{ range $i, $e := .l }}{{ $i }}{{ $e }};{{ end }}",
            data.clone()
        ),
        "0a;1b;2c;"
    );
    assert_eq!(
        r(
            "{{ range $k, $v := .m }}{{ $k }}={{ $v }} {{ end }}",
            data.clone()
        ),
        "a=2 z=1 "
    );
    assert_eq!(r("{{ range .l }}{{ . }}{{ end }}", data.clone()), "abc");
    assert_eq!(
        r("{{ range .none }}x{{ else }}empty{{ end }}", data.clone()),
        "empty"
    );
    assert_eq!(
        r(
            "{{ range .missing }}x{{ else }}empty{{ end }}",
            data.clone()
        ),
        "empty"
    );
    assert_eq!(
        r(
            r#"{{ range .l }}{{ if eq . "b" }}{{ continue }}{{ end }}{{ if eq . "c" }}{{ break }}{{ end }}{{ . }}{{ end }}"#,
            data
        ),
        "a"
    );
}

#[test]
fn if_else_if_with_and_variables_in_scope() {
    let data = json!({"t": "x", "f": "", "obj": {"name": "n"}});
    assert_eq!(
        r(
            "{{ if .f }}1{{ else if .t }}2{{ else }}3{{ end }}",
            data.clone()
        ),
        "2"
    );
    assert_eq!(r("{{ with .obj }}{{ .name }}{{ end }}", data.clone()), "n");
    assert_eq!(
        r("{{ with .f }}{{ . }}{{ else }}none{{ end }}", data.clone()),
        "none"
    );
    assert_eq!(
        r(
            "{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}",
            data.clone()
        ),
        "2"
    );
    assert_eq!(r("{{ with .obj }}{{ $.t }}{{ end }}", data.clone()), "x");
    assert!(render("{{ if true }}{{ $y := 1 }}{{ end }}{{ $y }}", &data)
        .unwrap_err()
        .to_string()
        .contains("undefined variable: $y"));
}

#[test]
fn pipelines_functions_and_parentheses() {
    let data = json!({"name": "eth0", "opts": {"k": "v"}, "l": ["a", "b"]});
    assert_eq!(
        r(r#"{{ .name | upper | printf "%s-%d" 3 }}"#, data.clone()),
        "%!s(int=3)-%!d(string=ETH0)"
    );
    assert_eq!(r(r#"{{ printf "%s-%d" .name 3 }}"#, data.clone()), "eth0-3");
    assert_eq!(
        r(r#"{{ (index .opts "k") | quote }}"#, data.clone()),
        "\"v\""
    );
    assert_eq!(
        r(
            r#"{{ join "," .l }} {{ len .l }} {{ default "d" .nope }}"#,
            data.clone()
        ),
        "a,b 2 d"
    );
    assert_eq!(
        r(
            r#"{{ and .name .nope }}|{{ or .nope "x" }}|{{ not .name }}"#,
            data.clone()
        ),
        "<no value>|x|false"
    );
    assert_eq!(r(r#"{{ print 1 2 "a" 3 }}"#, data.clone()), "1 2a3");
    assert_eq!(r(r#"{{ (dict "a" .opts).a.k }}"#, data.clone()), "v");
    assert_eq!(
        r("{{ toJson .opts }} {{ add 1 2 }}", data.clone()),
        r#"{"k":"v"} 3"#
    );
    assert!(render("{{ eq .l 1 }}", &data)
        .unwrap_err()
        .to_string()
        .contains("error calling eq"));
}

#[test]
fn define_and_template() {
    assert_eq!(
        r(
            r#"{{ define "x" }}[{{ .a }}]{{ end }}{{ template "x" . }}{{ template "x" .in }}"#,
            json!({"a": 1, "in": {"a": 2}})
        ),
        "[1][2]"
    );
}

#[test]
fn errors_name_the_problem() {
    let e = render("{{ nope 1 }}", &json!({})).unwrap_err().to_string();
    assert!(e.contains("function \"nope\" not defined"), "{e}");
    let e = render("a\n{{ if true }}", &json!({}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("unexpected EOF"), "{e}");
    let e = render("{{ .a", &json!({})).unwrap_err().to_string();
    assert!(e.contains("unclosed action"), "{e}");
}

#[test]
fn go_templates_are_told_from_minijinja() {
    assert!(is_go_template("{{ $m := dict }}"));
    assert!(is_go_template(
        "links:\n{{- range .BuilderDomain.Interfaces }}x{{ end }}"
    ));
    assert!(!is_go_template(
        "{% for i in interfaces %}{{ i.name }}{% endfor %}"
    ));
    assert!(!is_go_template("host={{ name }}"));
}

#[test]
fn a_runaway_template_stops_with_an_error() {
    let e = render("{{ range 100000000 }}x{{ end }}", &json!({}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("limit"), "{e}");
    let e = render(
        r#"{{ define "a" }}{{ template "a" }}{{ end }}{{ template "a" }}"#,
        &json!({}),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("maximum template depth"), "{e}");
}

proptest::proptest! {
    /// Whatever a Secret holds, rendering it returns a result: no panic.
    #[test]
    fn any_text_renders_or_fails_without_panicking(
        src in proptest::string::string_regex(r#"([a-z .$|()"`\-=:,/*{}]|\{\{|\}\}|range|end|if|else|with|define|template|dict|set|index){0,40}"#).unwrap()
    ) {
        let _ = render(&src, &json!({"a": {"b": [1, "x"]}, "l": [1, 2]}));
    }
}

#[test]
fn a_map_set_into_itself_prints_bounded_and_is_freed() {
    let out = r(
        r#"{{ $m := dict "a" 1 }}{{ $_ := set $m "me" $m }}{{ len $m }} {{ $m }} {{ toJson $m }}"#,
        json!({}),
    );
    assert!(
        out.starts_with("2 map[a:1 me:map[a:1 me:map[a:1 me:"),
        "{out}"
    );
    assert!(out.len() < 10_000, "{} bytes", out.len());
}
