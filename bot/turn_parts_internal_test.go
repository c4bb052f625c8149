package bot

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// A turn is built from the parts it uses (Cell.newTurn): it holds no pointer back to its
// cell or to the runner's dependencies, so each of its methods can use only its own parts.
// This fails when a field of type *Cell, Cell, *cellDeps or cellDeps comes back.
func TestTurnHoldsItsPartsNotItsCell(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := false
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != "turn" {
				return true
			}
			found = true
			for _, field := range ts.Type.(*ast.StructType).Fields.List {
				typ := strings.TrimPrefix(types(field.Type), "*")
				if typ == "Cell" || typ == "cellDeps" || typ == "Deps" {
					t.Errorf("%s: turn has a field of type %s: build the turn from the parts it uses instead", fset.Position(field.Pos()), types(field.Type))
				}
			}
			return false
		})
	}
	if !found {
		t.Fatal("no type turn in package bot")
	}
}

func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return "*" + types(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
