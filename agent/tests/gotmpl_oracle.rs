//! Foothold's Go-template engine (`foothold_agent::gotmpl`) against Go's own `text/template` with sprig
//! (`gotmpl-oracle`, built from the Go module proxy by `scripts/install-test-tools.sh`): the same template and
//! data must give the same bytes, or both an error. Airship's sample networkData template is rendered over the
//! values ViNO gives it for a planned VM.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use foothold_agent::controllers::vino::airship;
use foothold_agent::crd::vino::{Network, VmNodeSet};
use foothold_agent::vino_plan::InterfacePlan;

/// What Go prints, or None when it refuses the template or fails running it.
fn oracle(dir: &Path, template: &str, data: &Value) -> Option<String> {
    let (t, d) = (dir.join("t.tmpl"), dir.join("d.json"));
    std::fs::write(&t, template).unwrap();
    std::fs::write(&d, data.to_string()).unwrap();
    let out = Command::new(support::tool("gotmpl-oracle"))
        .arg(&t)
        .arg(&d)
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) => Some(String::from_utf8(out.stdout).unwrap()),
        Some(3 | 4) => None,
        _ => panic!(
            "gotmpl-oracle failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Where Go and the engine differ on `template` over `data`, if they do.
fn differs(dir: &Path, template: &str, data: &Value) -> Option<String> {
    let go = oracle(dir, template, data);
    let ours = foothold_agent::gotmpl::render(template, data);
    match (&go, &ours) {
        (Some(g), Ok(o)) if o == g => None,
        (None, Err(_)) => None,
        _ => Some(format!("{template:?}:\n  Go:   {go:?}\n  ours: {ours:?}")),
    }
}

fn agree(dir: &Path, templates: &[&str], data: &Value) {
    let diffs: Vec<String> = templates
        .iter()
        .filter_map(|t| differs(dir, t, data))
        .collect();
    assert!(diffs.is_empty(), "over {data}:\n{}", diffs.join("\n"));
}

#[test]
fn the_engine_prints_what_go_prints() {
    let dir = tempfile::tempdir().unwrap();
    let data = json!({
        "name": "eth0", "mtu": 1500, "big": 1000000, "n": 123456, "q": 0.25, "tiny": 0.00001, "neg": -2.5,
        "t": "x", "f": "", "zero": 0, "null": null, "yes": true,
        "l": ["a", "b", "c"], "nums": [1, 2.5], "none": [],
        "m": {"z": 1, "a": [1, "x"], "b": {"c": true}}, "empty": {},
    });
    let cases = [
        // printing
        "{{ .name }} {{ .mtu }} {{ .big }} {{ .n }} {{ .q }} {{ .tiny }} {{ .neg }} {{ .yes }}",
        "{{ .l }} {{ .nums }} {{ .none }} {{ .m }} {{ .empty }} {{ .null }}",
        "{{ .nope }}|{{ .m.nope }}|{{ .a.b.c }}|{{ index . \"nope\" }}|{{ index .m \"nope\" }}",
        "{{ print .nope }}|{{ .nope | quote }}|{{ eq .nope \"x\" }}|{{ print .null 1 2 \"s\" 3 }}",
        "{{ .null.x }}",
        "{{ 1.5 }} {{ 3 }} {{ -3 }} {{ \"s\" }} {{ `raw` }} {{ true }} {{ nil }}",
        // trimming and comments
        "a  {{- 1 -}}  b|a {{/* no */}} b|a\n  {{- /* gone */ -}}\n  b|a {{-3}}",
        // control
        "{{ range $i, $e := .l }}{{ $i }}{{ $e }};{{ end }}|{{ range $k, $v := .m }}{{ $k }}={{ $v }} {{ end }}",
        "{{ range .none }}x{{ else }}empty{{ end }}|{{ range .nope }}x{{ else }}nothing{{ end }}",
        "{{ range .l }}{{ if eq . \"b\" }}{{ continue }}{{ end }}{{ if eq . \"c\" }}{{ break }}{{ end }}{{ . }}{{ end }}",
        "{{ if .f }}1{{ else if .t }}2{{ else }}3{{ end }}|{{ with .m.b }}{{ .c }}{{ end }}|{{ with .f }}y{{ else }}n{{ end }}",
        "{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}|{{ with .m }}{{ $.t }}{{ end }}",
        "{{ if true }}{{ $y := 1 }}{{ end }}{{ $y }}",
        "{{ range $i, $_ := .l }}{{ $i }}{{ end }}|{{ range $e := .l }}{{ $e }}{{ end }}",
        // functions
        "{{ $m := dict }}{{ $_ := set $m \"a\" \"1\" }}{{ $n := $m }}{{ $_ := set $n \"b\" 2 }}{{ $m }} {{ len $m }}",
        "{{ .name | upper | printf \"%s-%d\" 3 }}|{{ printf \"%s-%d %v %q\" .name 3 .l .t }}",
        "{{ (index .m \"b\").c }}|{{ index .l 1 }}|{{ index .m \"a\" 0 }}|{{ len .l }}|{{ len .name }}",
        "{{ join \",\" .l }}|{{ default \"d\" .nope }}|{{ default \"d\" .f }}|{{ default \"d\" .t }}|{{ empty .none }}",
        "{{ and .name .nope }}|{{ or .nope \"x\" }}|{{ not .name }}|{{ and 1 0 2 }}|{{ or 0 \"\" }}",
        "{{ (dict \"a\" .m).a.z }}|{{ toJson .m }}|{{ add 1 2 }}|{{ sub 5 2 }}|{{ mul 3 4 }}|{{ div 7 2 }}|{{ mod 7 2 }}",
        "{{ hasKey .m \"z\" }}|{{ hasKey .m \"y\" }}|{{ $d := dict \"k\" 1 }}{{ $_ := unset $d \"k\" }}{{ $d }}",
        "{{ list 1 \"a\" }}|{{ append .l \"d\" }}|{{ first .l }}|{{ last .l }}|{{ ternary \"y\" \"n\" true }}",
        "{{ trim \"  x \" }}|{{ trimPrefix \"a\" \"abc\" }}|{{ trimSuffix \"c\" \"abc\" }}|{{ replace \"a\" \"b\" \"aaa\" }}",
        "{{ contains \"b\" \"abc\" }}|{{ hasPrefix \"a\" \"abc\" }}|{{ hasSuffix \"x\" \"abc\" }}|{{ squote \"a\" }}",
        "{{ indent 2 \"a\\nb\" }}|{{ nindent 2 \"a\" }}|{{ toString 5 }}|{{ int \"42\" }}|{{ b64enc \"hi\" }}|{{ b64dec \"aGk=\" }}",
        "{{ eq .mtu 1500.0 }}|{{ eq .t \"x\" \"y\" }}|{{ ne .t \"x\" }}|{{ lt 1 2 }}|{{ ge \"b\" \"a\" }}",
        "{{ eq .mtu 1500 }}",
        "{{ define \"x\" }}[{{ .z }}]{{ end }}{{ template \"x\" .m }}{{ template \"x\" . }}",
        "{{ range $k, $v := .m }}{{ range $i, $x := $.l }}{{ $k }}{{ $i }}{{ $x }}{{ end }},{{ end }}",
        "{{- range .l }}\n  - {{ . }}\n{{- end }}\n",
        "{{ with $x := .m.b }}{{ $x.c }}{{ end }}|{{ if $y := .t }}{{ $y }}{{ end }}",
        "{{ printf \"%v|%v|%v|%d|%q\" .m .null .yes .zero .l }}",
        "{{ println 1 \"a\" }}{{ print \"a\" \"b\" }}",
        "{{ index .m \"b\" \"c\" }}|{{ (index .l 0) | upper }}|{{ .m.b | toJson }}",
        "{{ range 3 }}{{ . }}{{ end }}",
        "{{ coalesce .nope .f .t }}|{{ empty .zero }}|{{ empty .m }}|{{ default 5 .zero }}",
        // refused
        "{{ index .l 5 }}",
        "{{ range .name }}x{{ end }}",
        "{{ template \"none\" }}",
        "{{ $z = 1 }}",
        "{{ nope 1 }}",
        "{{ if true }}",
        "{{ .a",
        "{{ len 3 }}",
    ];
    agree(dir.path(), &cases, &data);
}

fn vino_values(mtu: i64, options: Value, routes: Value) -> Value {
    let set: VmNodeSet = serde_json::from_value(json!({
        "name": "worker", "count": 1,
        "networkInterfaces": [{"name": "enp1s0", "network": "oam", "mtu": mtu, "options": options},
                              {"name": "enp2s0", "network": "pxe"}],
    }))
    .unwrap();
    let networks: Vec<Network> = serde_json::from_value(json!([
        {"name": "oam", "subnet": "192.168.100.0/24", "dns_servers": ["135.188.34.124"], "routes": routes},
        {"name": "pxe", "subnet": "172.3.3.0/24", "type": "ipv4"},
    ]))
    .unwrap();
    let interfaces = vec![
        InterfacePlan {
            name: "enp1s0".into(),
            network: "oam".into(),
            mac: "52:54:00:06:00:01".into(),
            ip: Some("192.168.100.11".into()),
            ..InterfacePlan::default()
        },
        InterfacePlan {
            name: "enp2s0".into(),
            network: "pxe".into(),
            mac: "52:54:00:07:00:01".into(),
            ip: Some("172.3.3.11".into()),
            ..InterfacePlan::default()
        },
    ];
    airship::template_values(&airship::VmValues {
        bmh: "site-v-n1-worker-0",
        vm: "n1-worker-0",
        set: &set,
        networks: &networks,
        interfaces: &interfaces,
        boot_mac: Some("52:54:00:07:00:01"),
        bridge_ips: &[("oam".to_owned(), "192.168.100.2".to_owned())].into(),
        vnc_password: Some("Vnc2pass"),
    })
}

#[test]
fn airships_sample_network_template_renders_as_go_renders_it() {
    let dir = tempfile::tempdir().unwrap();
    let secret: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/airship/network-template-secret.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let template = secret["stringData"]["template"].as_str().unwrap();
    for data in [
        vino_values(1500, json!({}), json!([])),
        vino_values(
            9100,
            json!({"bond_mode": "802.3ad", "vlan": "41"}),
            json!([{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "192.168.100.1"},
                   {"network": "10.0.0.0", "netmask": "", "gateway": "192.168.100.2"}]),
        ),
    ] {
        agree(dir.path(), &[template], &data);
    }
}

/// Templates put together at random from pieces that exercise printing, pipelines, variables, control and
/// trimming; Go and the engine must agree on each (seeded: the same 300 every run).
#[test]
fn random_templates_render_as_go_renders_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = json!({"a": {"b": [1, "x", null], "c": 1500, "d": ""}, "l": ["p", "q"], "n": 0.5, "s": "str",
                      "m": {"k1": {"v": 1}, "k2": {"v": 2}}, "z": null});
    let values = [
        ".a",
        ".a.b",
        ".a.c",
        ".a.d",
        ".l",
        ".n",
        ".s",
        ".m",
        ".z",
        ".nope",
        "$",
        "$.l",
        "1",
        "2.5",
        "\"t\"",
        "true",
        "(index .l 1)",
        "(len .l)",
        "(dict \"k\" .s)",
        "(list .n .s)",
        "(index .a.b 2)",
    ];
    let funcs = [
        "print",
        "len",
        "upper",
        "quote",
        "toJson",
        "default \"d\"",
        "printf \"%v-%s\"",
        "not",
        "empty",
        "first",
    ];
    let mut seed: u64 = 0x5eed;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut templates = Vec::new();
    for _ in 0..300 {
        let mut t = String::new();
        for _ in 0..1 + next(3) {
            let v = values[next(values.len())];
            let trim_l = if next(4) == 0 { "- " } else { " " };
            let trim_r = if next(4) == 0 { " -" } else { " " };
            let piece = match next(7) {
                0 => format!("{{{{{trim_l}{v}{trim_r}}}}}"),
                1 => format!("{{{{{trim_l}{v} | {}{trim_r}}}}}", funcs[next(funcs.len())]),
                2 => format!("{{{{ if {v} }}}}y {{{{ {v} }}}}{{{{ else }}}}n{{{{ end }}}}"),
                3 => format!("{{{{ range $i, $e := {v} }}}}[{{{{ $i }}}}:{{{{ $e }}}}]{{{{ else }}}}-{{{{ end }}}}"),
                4 => format!("{{{{ with {v} }}}}<{{{{ . }}}}>{{{{ end }}}}"),
                5 => format!("{{{{ $x := {v} }}}}{{{{ $x }}}}"),
                _ => format!("{{{{ {} {v} }}}}", funcs[next(funcs.len())]),
            };
            t.push_str(&piece);
            t.push_str(["", " ", "\n  ", "x"][next(4)]);
        }
        templates.push(t);
    }
    let refs: Vec<&str> = templates.iter().map(String::as_str).collect();
    agree(dir.path(), &refs, &data);
}
