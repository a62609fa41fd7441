// promql-check reads a Prometheus rule file and a Grafana dashboard with Prometheus's own parsers (as `promtool
// check rules` does for the rules) and prints, as JSON, the metric names each alert and each panel selects:
// agent/tests/http/monitoring.rs checks them against a running agent's /metrics. A rule file or expression
// that does not parse is an error naming the file, the rule or panel, and the parser's message (exit status 1).
//
//	promql-check RULES.yaml DASHBOARD.json
package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Uses is one alert or one panel: its name and the metric names its expressions select.
type Uses struct {
	Name    string   `json:"name"`
	Metrics []string `json:"metrics"`
}

type report struct {
	Alerts []Uses `json:"alerts"`
	Panels []Uses `json:"panels"`
}

func selected(p parser.Parser, expr string) ([]string, error) {
	e, err := p.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if v, ok := n.(*parser.VectorSelector); ok {
			seen[v.Name] = true
		}
		return nil
	})
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "promql-check: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: promql-check RULES.yaml DASHBOARD.json")
	}
	rulesFile, dashboardFile := os.Args[1], os.Args[2]
	p := parser.NewParser(parser.Options{})
	var out report

	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, e := range errs {
		// Each error names the file already.
		fmt.Fprintf(os.Stderr, "promql-check: %v\n", e)
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			metrics, err := selected(p, r.Expr)
			if err != nil {
				fail("%s: group %s, rule %s: %v", rulesFile, g.Name, name, err)
			}
			out.Alerts = append(out.Alerts, Uses{Name: name, Metrics: metrics})
		}
	}

	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		fail("%v", err)
	}
	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		fail("%s: %v", dashboardFile, err)
	}
	for _, panel := range dashboard.Panels {
		if len(panel.Targets) == 0 {
			fail("%s: panel %q has no query", dashboardFile, panel.Title)
		}
		uses := Uses{Name: panel.Title, Metrics: []string{}}
		for _, t := range panel.Targets {
			metrics, err := selected(p, t.Expr)
			if err != nil {
				fail("%s: panel %q: %v", dashboardFile, panel.Title, err)
			}
			uses.Metrics = append(uses.Metrics, metrics...)
		}
		out.Panels = append(out.Panels, uses)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fail("%v", err)
	}
}
