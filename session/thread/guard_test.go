package thread_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// turnMarkers are the payload types of the markers the turns fold reads.
var turnMarkers = map[string]bool{
	"TurnStarted": true, "TurnCompleted": true, "Queued": true, "Steered": true,
	"StopRequested": true, "TurnStopped": true, "TurnSuspended": true, "ToolStarted": true,
	"ApprovalRequested": true, "ApprovalDecided": true, "Delivered": true,
	"StreamStarted": true, "StreamStopped": true, "CellWoken": true,
}

// Every reader of turn state reads the turns fold: outside session (whose packages write the
// payloads and fold them), no code decodes a turn marker's payload itself. The check parses
// the module's non-test Go files and finds every Decode(&v) and json.Unmarshal(b, &v) whose v
// is declared as one of the payload types (a var, a := of a composite literal, a parameter,
// &session.T{} or new(session.T) in place).
func TestNoTurnMarkerDecodedOutsideSession(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	sites := markerDecodes(t, root)
	files := map[string]int{}
	for _, s := range sites {
		files[s.file]++
	}
	t.Logf("%d decodes of a turn marker outside session, in %d files", len(sites), len(files))
	for _, s := range sites {
		t.Errorf("%s:%d decodes a session.%s payload: read it off the turns fold (session/thread.Turns) instead", s.file, s.line, s.typ)
	}
}

type decodeSite struct {
	file string
	line int
	typ  string
}

func markerDecodes(t *testing.T, root string) []decodeSite {
	t.Helper()
	var sites []decodeSite
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "session" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if typ := decodedMarker(call); typ != "" {
				sites = append(sites, decodeSite{file: rel, line: fset.Position(call.Pos()).Line, typ: typ})
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(sites, func(i, j int) bool {
		if sites[i].file != sites[j].file {
			return sites[i].file < sites[j].file
		}
		return sites[i].line < sites[j].line
	})
	return sites
}

// decodedMarker is the marker payload type call decodes into, "" when it decodes none.
func decodedMarker(call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	var target ast.Expr
	switch {
	case sel.Sel.Name == "Decode" && len(call.Args) == 1:
		target = call.Args[0]
	case sel.Sel.Name == "Unmarshal" && isIdent(sel.X, "json") && len(call.Args) == 2:
		target = call.Args[1]
	default:
		return ""
	}
	return markerType(target)
}

// markerType is the marker payload type of the value e points to, "" when it is none or
// cannot be told from the file alone.
func markerType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.UnaryExpr:
		if x.Op == token.AND {
			return markerType(x.X)
		}
	case *ast.CompositeLit:
		return sessionType(x.Type)
	case *ast.CallExpr:
		if isIdent(x.Fun, "new") && len(x.Args) == 1 {
			return sessionType(x.Args[0])
		}
	case *ast.Ident:
		if x.Obj == nil {
			return ""
		}
		switch d := x.Obj.Decl.(type) {
		case *ast.ValueSpec:
			if d.Type != nil {
				return sessionType(d.Type)
			}
			for i, n := range d.Names {
				if n.Name == x.Name && i < len(d.Values) {
					return markerType(d.Values[i])
				}
			}
		case *ast.AssignStmt:
			for i, l := range d.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name == x.Name && i < len(d.Rhs) {
					return markerType(d.Rhs[i])
				}
			}
		case *ast.Field:
			return sessionType(d.Type)
		}
	}
	return ""
}

func sessionType(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if ok && isIdent(sel.X, "session") && turnMarkers[sel.Sel.Name] {
		return sel.Sel.Name
	}
	return ""
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
