// Package niltest calls a package's exported functions and methods with
// nil and zero arguments, as the sweep of issue 47 asks: each returns (an
// error, or a zero result) and never panics on a nil dereference or an
// index out of range, nor hangs. A call whose doc comment says it panics
// may, with a message of its own.
package niltest

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// API is what a package exports: its functions, the types with exported
// methods, and the calls ("F" or "T.M") whose doc comment says they panic.
type API struct {
	Funcs, Types []string
	Panics       map[string]bool
}

// Exported reads the API of the package in dir from its non-test files.
func Exported(t *testing.T, dir string) API {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	api := API{Panics: map[string]bool{}}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			key := fd.Name.Name
			if fd.Recv == nil {
				if !slices.Contains(api.Funcs, key) {
					api.Funcs = append(api.Funcs, key)
				}
			} else {
				recv := fd.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if g, ok := recv.(*ast.IndexExpr); ok {
					recv = g.X
				}
				id, ok := recv.(*ast.Ident)
				if !ok || !id.IsExported() {
					continue
				}
				if !slices.Contains(api.Types, id.Name) {
					api.Types = append(api.Types, id.Name)
				}
				key = id.Name + "." + key
			}
			if fd.Doc != nil && strings.Contains(fd.Doc.Text(), "panic") {
				api.Panics[key] = true
			}
		}
	}
	slices.Sort(api.Funcs)
	slices.Sort(api.Types)
	return api
}

// Policy says which panics are the package's documented way to fail.
type Policy struct {
	// Prefix begins the message of every panic the package documents.
	Prefix string
	// ErrorPanics accepts, from every call, a panic with an error (no
	// runtime error) that begins with Prefix: nb's calls fail so, in a cell.
	ErrorPanics bool
}

// limit is how long one call may take.
const limit = 30 * time.Second

// Call calls fn with zero arguments, then with -1 for every integer (a
// variadic parameter gets none), and fails t on a panic the policy does
// not accept or a call that does not return; documented says fn's doc
// comment says it panics.
func Call(t *testing.T, name string, fn reflect.Value, p Policy, documented bool) {
	t.Helper()
	ft := fn.Type()
	for _, minus := range []bool{false, true} {
		args := make([]reflect.Value, ft.NumIn())
		if ft.IsVariadic() {
			args = args[:len(args)-1]
		}
		for i := range args {
			args[i] = reflect.New(ft.In(i)).Elem()
			if minus {
				switch args[i].Kind() {
				case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
					args[i].SetInt(-1)
				}
			}
		}
		what := name + " with zero arguments"
		if minus {
			what = name + " with -1 for integers"
		}
		done := make(chan any, 1)
		go func() {
			defer func() { done <- recover() }()
			fn.Call(args)
		}()
		select {
		case r := <-done:
			if r != nil {
				check(t, what, r, p, documented)
			}
		case <-time.After(limit):
			t.Errorf("%s: hangs (no return in %v)", what, limit)
		}
	}
}

func check(t *testing.T, what string, r any, p Policy, documented bool) {
	t.Helper()
	var re runtime.Error
	if err, ok := r.(error); ok && errors.As(err, &re) {
		t.Errorf("%s: panics: %v", what, err)
		return
	}
	_, isErr := r.(error)
	msg := fmt.Sprint(r)
	switch {
	case !documented && !(p.ErrorPanics && isErr):
		t.Errorf("%s: panics with %q (return an error, or say so in its doc comment)", what, msg)
	case !strings.HasPrefix(msg, p.Prefix):
		t.Errorf("%s: panics with %q, which does not begin %q", what, msg, p.Prefix)
	}
}

// Sweep calls, as Call does, every function of api and every method of
// each of its types on each of its receivers: funcs and receivers must
// cover them all, so that a new one fails until it is added.
func Sweep(t *testing.T, pkg string, api API, funcs map[string]any, receivers map[string][]func() any, p Policy) {
	t.Helper()
	for _, n := range api.Funcs {
		fn, ok := funcs[n]
		require.True(t, ok, "%s.%s: add it to the sweep", pkg, n)
		Call(t, pkg+"."+n, reflect.ValueOf(fn), p, api.Panics[n])
	}
	for n := range funcs {
		require.True(t, slices.Contains(api.Funcs, n), "%s.%s is no exported function", pkg, n)
	}
	for _, typ := range api.Types {
		recvs, ok := receivers[typ]
		require.True(t, ok, "%s.%s has methods: add receivers of it to the sweep", pkg, typ)
		for i, recv := range recvs {
			methods(t, fmt.Sprintf("%s.%s (receiver %d)", pkg, typ, i), typ, recv, api, p)
		}
	}
}

// methods calls every exported method of the receiver that recv makes,
// each on a new one. A nil pointer's value methods are left out: Go
// itself panics calling those.
func methods(t *testing.T, name, typ string, recv func() any, api API, p Policy) {
	t.Helper()
	rt := reflect.TypeOf(recv())
	require.NotZero(t, rt.NumMethod(), "%s has no exported methods", name)
	for i := range rt.NumMethod() {
		m := rt.Method(i)
		r := reflect.ValueOf(recv())
		if r.Kind() == reflect.Pointer && r.IsNil() {
			if _, value := rt.Elem().MethodByName(m.Name); value {
				continue
			}
		}
		Call(t, name+"."+m.Name, r.Method(i), p, api.Panics[typ+"."+m.Name])
	}
}
