// walk measures a walk of one turn through logbook's code (issue 45): a depth-first walk of
// the static call graph from bot's (*turn).run, calls in source order, each function of the
// module's bot, session and sandbox trees once (calls through interfaces are not followed);
// a "room" is a file. It prints the rooms entered and the returns to a room already left.
//
//	cd bench/walk && go run . ../..     # the checkout to measure
//
// A nested module, so that the main module does not depend on golang.org/x/tools.
package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	dir, err := filepath.Abs(os.Args[1])
	if err != nil {
		panic(err)
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports | packages.NeedDeps, Dir: dir}
	pkgs, err := packages.Load(cfg, "./bot/...", "./session/...", "./sandbox/...")
	if err != nil {
		panic(err)
	}
	decls := map[*types.Func]*ast.FuncDecl{}
	infos := map[*types.Func]*types.Info{}
	fset := map[*types.Func]*token.FileSet{}
	var start *types.Func
	for _, p := range pkgs {
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				fn, _ := p.TypesInfo.Defs[fd.Name].(*types.Func)
				if fn == nil {
					continue
				}
				decls[fn], infos[fn], fset[fn] = fd, p.TypesInfo, p.Fset
				if p.PkgPath == "github.com/logbook/logbook/bot" && fd.Name.Name == "run" && fd.Recv != nil {
					if s, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
						if id, ok := s.X.(*ast.Ident); ok && id.Name == "turn" {
							start = fn
						}
					}
				}
			}
		}
	}
	if start == nil {
		panic("no (*turn).run")
	}
	fileOf := func(fn *types.Func) string {
		rel, _ := filepath.Rel(dir, fset[fn].Position(decls[fn].Pos()).Filename)
		return rel
	}
	seen := map[*types.Func]bool{}
	rooms := map[string]bool{}
	left := map[string]bool{}
	cur := ""
	returns := 0
	enter := func(f string) {
		if f == cur {
			return
		}
		if cur != "" {
			left[cur] = true
		}
		if left[f] {
			returns++
		}
		rooms[f] = true
		cur = f
	}
	var walk func(fn *types.Func)
	walk = func(fn *types.Func) {
		seen[fn] = true
		here := fileOf(fn)
		enter(here)
		info := infos[fn]
		ast.Inspect(decls[fn].Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var id *ast.Ident
			switch f := call.Fun.(type) {
			case *ast.Ident:
				id = f
			case *ast.SelectorExpr:
				id = f.Sel
			case *ast.IndexExpr:
				if i, ok := f.X.(*ast.Ident); ok {
					id = i
				}
			}
			if id == nil {
				return true
			}
			callee, _ := info.Uses[id].(*types.Func)
			if callee == nil {
				return true
			}
			callee = callee.Origin()
			if _, ok := decls[callee]; !ok || seen[callee] {
				return true
			}
			walk(callee)
			enter(here)
			return true
		})
	}
	walk(start)
	var inBot int
	for r := range rooms {
		if strings.HasPrefix(r, "bot/") {
			inBot++
		}
	}
	fmt.Printf("walk of (*turn).run: %d functions, %d rooms entered (%d under bot/), %d returns to a room already left\n", len(seen), len(rooms), inBot, returns)
}
