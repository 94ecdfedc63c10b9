package vk

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

type structLayout struct {
	cname  string
	goType reflect.Type
	fields []string // C member names, in order
}

type constantValue struct {
	cname  string
	signed bool
	value  any // int64 or uint64
}

// TestLayoutsMatchC compiles a C program that prints sizeof, alignof and
// offsetof for every generated struct and member, and the value of every
// generated constant, and compares them with the Go declarations.
func TestLayoutsMatchC(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: cannot check struct layouts against C")
	}
	if _, err := os.Stat("/usr/include/vulkan/vulkan.h"); err != nil {
		t.Skip("the Vulkan headers (Debian libvulkan-dev) are not installed: cannot check struct layouts against C")
	}
	var src bytes.Buffer
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <vulkan/vulkan.h>\nint main(void) {\n")
	for _, s := range structLayouts {
		fmt.Fprintf(&src, "printf(\"%s %%zu %%zu\\n\", sizeof(%s), _Alignof(%s));\n", s.cname, s.cname, s.cname)
		for _, f := range s.fields {
			fmt.Fprintf(&src, "printf(\"%s.%s %%zu\\n\", offsetof(%s, %s));\n", s.cname, f, s.cname, f)
		}
	}
	for _, c := range constantValues {
		if c.signed {
			fmt.Fprintf(&src, "printf(\"%s %%lld\\n\", (long long)%s);\n", c.cname, c.cname)
		} else {
			fmt.Fprintf(&src, "printf(\"%s %%llu\\n\", (unsigned long long)%s);\n", c.cname, c.cname)
		}
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	cfile, exe := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(cfile, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-o", exe, cfile).CombinedOutput(); err != nil {
		t.Fatalf("compiling the layout program: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	c := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		c[f[0]] = f[1:]
	}
	num := func(key string, i int) uint64 {
		t.Helper()
		v, ok := c[key]
		if !ok || len(v) <= i {
			t.Fatalf("the C program printed nothing for %s", key)
		}
		n, err := strconv.ParseUint(v[i], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, s := range structLayouts {
		if got, want := uint64(s.goType.Size()), num(s.cname, 0); got != want {
			t.Errorf("%s: Go size %d, C size %d", s.cname, got, want)
		}
		if got, want := uint64(s.goType.Align()), num(s.cname, 1); got != want {
			t.Errorf("%s: Go alignment %d, C alignment %d", s.cname, got, want)
		}
		var goFields []reflect.StructField
		for i := range s.goType.NumField() {
			if f := s.goType.Field(i); f.Name != "_" {
				goFields = append(goFields, f)
			}
		}
		if len(goFields) != len(s.fields) {
			t.Errorf("%s: Go has %d fields, C %d", s.cname, len(goFields), len(s.fields))
			continue
		}
		for i, name := range s.fields {
			if got, want := uint64(goFields[i].Offset), num(s.cname+"."+name, 0); got != want {
				t.Errorf("%s.%s: Go offset %d (field %s), C offset %d", s.cname, name, got, goFields[i].Name, want)
			}
		}
	}
	for _, k := range constantValues {
		v, ok := c[k.cname]
		if !ok {
			t.Fatalf("the C program printed nothing for %s", k.cname)
		}
		if got := fmt.Sprint(k.value); got != v[0] {
			t.Errorf("%s: Go %s, C %s", k.cname, got, v[0])
		}
	}
	t.Logf("checked %d structs and %d constants against C", len(structLayouts), len(constantValues))
}
