// gotmpl-oracle renders a Go text/template with sprig's functions over JSON data, as Airship's ViNO renders
// networkData templates: the oracle for Foothold's own implementation (agent/src/gotmpl). A test tool only.
//
//	gotmpl-oracle TEMPLATE-FILE DATA-JSON-FILE
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/template"

	"github.com/Masterminds/sprig"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gotmpl-oracle TEMPLATE-FILE DATA-JSON-FILE")
		os.Exit(2)
	}
	src, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	raw, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var data interface{}
	if err := json.Unmarshal(raw, &data); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tpl, err := template.New("net-template").Funcs(sprig.TxtFuncMap()).Parse(string(src))
	if err != nil {
		fmt.Fprintln(os.Stderr, "parse:", err)
		os.Exit(3)
	}
	if err := tpl.Execute(os.Stdout, data); err != nil {
		fmt.Fprintln(os.Stderr, "execute:", err)
		os.Exit(4)
	}
}
