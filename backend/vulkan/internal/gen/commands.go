package main

import (
	"bytes"
	"fmt"
	"go/token"
	"strings"
)

// level says how a command's pointer is obtained: before any instance, from
// the instance, or from the device (skipping the loader's dispatch).
func (g *gen) level(c *xCommand) (string, error) {
	if strings.HasPrefix(c.name(), "vkEnumerateInstance") || c.name() == "vkCreateInstance" {
		return "levelGlobal", nil
	}
	if c.name() == "vkGetDeviceProcAddr" || len(c.Params) == 0 {
		return "levelInstance", nil
	}
	switch c.Params[0].Type {
	case "VkInstance", "VkPhysicalDevice":
		return "levelInstance", nil
	case "VkDevice", "VkQueue", "VkCommandBuffer":
		return "levelDevice", nil
	}
	return "", fmt.Errorf("%s: cannot tell its dispatch level", c.name())
}

func (g *gen) writeCommands(w *bytes.Buffer) error {
	w.WriteString(header + "package vk\n\nimport (\n\"unsafe\"\n\n\"github.com/ebitengine/purego\"\n)\n\n")
	w.WriteString("// Command indices into Funcs.ptrs.\nconst (\n")
	for i, n := range commands {
		fmt.Fprintf(w, "cmd%s = %d\n", goName(strings.TrimPrefix(n, "vk")), i)
	}
	fmt.Fprintf(w, "numCommands = %d\n)\n\n", len(commands))
	w.WriteString("// commandInfo gives each command's NUL-terminated name, level and whether it may be absent.\nvar commandInfo = [numCommands]struct {\nname string\nlevel level\noptional bool\n}{\n")
	var bodies bytes.Buffer
	for _, n := range commands {
		c, ok := g.r.commands[n]
		if !ok {
			return fmt.Errorf("command %s is not in the registry", n)
		}
		if c.Alias != "" {
			return fmt.Errorf("command %s is an alias of %s: list the latter", n, c.Alias)
		}
		lv, err := g.level(c)
		if err != nil {
			return err
		}
		optional := !g.r.core10[n]
		fmt.Fprintf(w, "{%q, %s, %v},\n", n+"\x00", lv, optional)
		if err := g.writeWrapper(&bodies, c, optional); err != nil {
			return err
		}
	}
	w.WriteString("}\n\n")
	w.Write(bodies.Bytes())
	return nil
}

func (g *gen) writeWrapper(w *bytes.Buffer, c *xCommand, optional bool) error {
	n := c.name()
	method := strings.TrimPrefix(n, "vk")
	idx := "cmd" + method
	var params, args []string
	for _, p := range c.Params {
		if !forVulkan(p.API) {
			continue
		}
		d, err := parseDecl(p)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		typ, err := g.goType(d)
		if err != nil {
			return fmt.Errorf("%s(%s): %w", n, d.name, err)
		}
		if typ == "float32" || typ == "float64" {
			return fmt.Errorf("%s(%s): float arguments go in other registers than SyscallN uses", n, d.name)
		}
		name := d.name
		if token.IsKeyword(name) {
			name += "_"
		}
		params = append(params, name+" "+typ)
		switch {
		case typ == "unsafe.Pointer":
			args = append(args, "uintptr("+name+")")
		case strings.HasPrefix(typ, "*"):
			args = append(args, "uintptr(unsafe.Pointer("+name+"))")
		default:
			args = append(args, "uintptr("+name+")")
		}
	}
	call := fmt.Sprintf("purego.SyscallN(f.ptrs[%s], %s)", idx, strings.Join(args, ", "))
	fmt.Fprintf(w, "// %s calls %s.\n", method, n)
	ret := c.Proto.Type
	sig := fmt.Sprintf("func (f *Funcs) %s(%s)", method, strings.Join(params, ", "))
	switch {
	case ret == "void":
		fmt.Fprintf(w, "%s {\n%s\n}\n\n", sig, call)
	case ret == "VkResult" && (c.SuccessCodes == "" || c.SuccessCodes == "VK_SUCCESS"):
		fmt.Fprintf(w, "%s error {\nr, _, _ := %s\nreturn check(%q, Result(int32(r)))\n}\n\n", sig, call, n)
	case ret == "VkResult":
		fmt.Fprintf(w, "// Besides VK_SUCCESS it may return %s.\n%s (Result, error) {\nr, _, _ := %s\nreturn Result(int32(r)), check(%q, Result(int32(r)))\n}\n\n",
			strings.ReplaceAll(strings.TrimPrefix(c.SuccessCodes, "VK_SUCCESS,"), ",", ", "), sig, call, n)
	case ret == "PFN_vkVoidFunction":
		fmt.Fprintf(w, "%s uintptr {\nr, _, _ := %s\nreturn r\n}\n\n", sig, call)
	default:
		return fmt.Errorf("%s returns %s, which the generator does not handle", n, ret)
	}
	if optional {
		fmt.Fprintf(w, "// Has%s reports whether %s was found.\nfunc (f *Funcs) Has%s() bool { return f.ptrs[%s] != 0 }\n\n", method, n, method, idx)
	}
	return nil
}
