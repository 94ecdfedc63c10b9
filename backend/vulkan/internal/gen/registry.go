package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// The parts of vk.xml the generator reads.
type xRegistry struct {
	Tags       []xTag       `xml:"tags>tag"`
	Types      []xType      `xml:"types>type"`
	Enums      []xEnums     `xml:"enums"`
	Commands   []xCommand   `xml:"commands>command"`
	Features   []xFeature   `xml:"feature"`
	Extensions []xExtension `xml:"extensions>extension"`
}

type xTag struct {
	Name string `xml:"name,attr"`
}

type xType struct {
	Category  string    `xml:"category,attr"`
	NameAttr  string    `xml:"name,attr"`
	Alias     string    `xml:"alias,attr"`
	Requires  string    `xml:"requires,attr"`
	BitValues string    `xml:"bitvalues,attr"`
	API       string    `xml:"api,attr"`
	NameElem  string    `xml:"name"`
	TypeElem  string    `xml:"type"`
	Members   []xMember `xml:"member"`
}

func (t *xType) name() string {
	if t.NameAttr != "" {
		return t.NameAttr
	}
	return t.NameElem
}

// xMember is a struct member or a command parameter: a C declaration with
// the type and name marked up.
type xMember struct {
	API   string `xml:"api,attr"`
	Type  string `xml:"type"`
	Name  string `xml:"name"`
	Inner string `xml:",innerxml"`
}

type xEnums struct {
	Name  string  `xml:"name,attr"`
	Type  string  `xml:"type,attr"`
	Enums []xEnum `xml:"enum"`
}

type xEnum struct {
	Name      string `xml:"name,attr"`
	Value     string `xml:"value,attr"`
	Bitpos    string `xml:"bitpos,attr"`
	Alias     string `xml:"alias,attr"`
	Type      string `xml:"type,attr"`
	Extends   string `xml:"extends,attr"`
	Offset    string `xml:"offset,attr"`
	Extnumber string `xml:"extnumber,attr"`
	Dir       string `xml:"dir,attr"`
	API       string `xml:"api,attr"`
}

type xCommand struct {
	NameAttr     string    `xml:"name,attr"`
	Alias        string    `xml:"alias,attr"`
	API          string    `xml:"api,attr"`
	SuccessCodes string    `xml:"successcodes,attr"`
	Proto        xMember   `xml:"proto"`
	Params       []xMember `xml:"param"`
}

func (c *xCommand) name() string {
	if c.NameAttr != "" {
		return c.NameAttr
	}
	return c.Proto.Name
}

type xFeature struct {
	API      string     `xml:"api,attr"`
	Name     string     `xml:"name,attr"`
	Requires []xRequire `xml:"require"`
}

type xExtension struct {
	Name      string     `xml:"name,attr"`
	Number    string     `xml:"number,attr"`
	Supported string     `xml:"supported,attr"`
	Requires  []xRequire `xml:"require"`
}

type xRequire struct {
	Enums    []xEnum `xml:"enum"`
	Commands []struct {
		Name string `xml:"name,attr"`
	} `xml:"command"`
}

// forVulkan reports whether an api attribute includes plain Vulkan (not only Vulkan SC).
func forVulkan(api string) bool {
	if api == "" {
		return true
	}
	for _, a := range strings.Split(api, ",") {
		if a == "vulkan" {
			return true
		}
	}
	return false
}

// enumValue is a resolved enumerant: its group (enum type or "API
// Constants") and value; C types of API constants are kept for printing.
type enumValue struct {
	group string
	value int64
	ctype string
}

// registry is vk.xml indexed by name.
type registry struct {
	types    map[string]*xType
	enums    map[string]enumValue
	groups   map[string]*xEnums
	commands map[string]*xCommand
	tags     []string
	// core10 holds the commands of Vulkan 1.0, which every loader has.
	core10 map[string]bool
}

func loadRegistry(path string) (*registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var x xRegistry
	if err := xml.Unmarshal(data, &x); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := &registry{types: map[string]*xType{}, enums: map[string]enumValue{}, groups: map[string]*xEnums{}, commands: map[string]*xCommand{}, core10: map[string]bool{}}
	for _, t := range x.Tags {
		r.tags = append(r.tags, t.Name)
	}
	for i := range x.Types {
		t := &x.Types[i]
		if forVulkan(t.API) && t.name() != "" {
			r.types[t.name()] = t
		}
	}
	for i := range x.Commands {
		c := &x.Commands[i]
		if forVulkan(c.API) {
			r.commands[c.name()] = c
		}
	}
	var aliases []xEnum
	add := func(group string, e xEnum, extNumber string) error {
		if !forVulkan(e.API) || e.Name == "" {
			return nil
		}
		if e.Alias != "" {
			e.Extends = group
			aliases = append(aliases, e)
			return nil
		}
		v, err := r.resolve(e, extNumber)
		if err != nil {
			return fmt.Errorf("enum %s: %w", e.Name, err)
		}
		if v == nil {
			return nil
		}
		r.enums[e.Name] = enumValue{group: group, value: *v, ctype: e.Type}
		return nil
	}
	for i := range x.Enums {
		g := &x.Enums[i]
		r.groups[g.Name] = g
		for _, e := range g.Enums {
			if err := add(g.Name, e, ""); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range x.Features {
		if !forVulkan(f.API) {
			continue
		}
		for _, req := range f.Requires {
			for _, c := range req.Commands {
				if f.Name == "VK_VERSION_1_0" {
					r.core10[c.Name] = true
				}
			}
			for _, e := range req.Enums {
				if e.Extends != "" {
					if err := add(e.Extends, e, ""); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	for _, ext := range x.Extensions {
		if ext.Supported == "disabled" {
			continue
		}
		for _, req := range ext.Requires {
			for _, e := range req.Enums {
				if e.Extends != "" {
					if err := add(e.Extends, e, ext.Number); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	// Aliases may point at aliases; resolve until nothing changes.
	for changed := true; changed; {
		changed = false
		for _, a := range aliases {
			if _, done := r.enums[a.Name]; done {
				continue
			}
			if v, ok := r.enums[a.Alias]; ok {
				r.enums[a.Name] = v
				changed = true
			}
		}
	}
	return r, nil
}

// resolve computes an enumerant's value; nil for values that are not
// integers (strings, floats).
func (r *registry) resolve(e xEnum, extNumber string) (*int64, error) {
	var v int64
	switch {
	case e.Bitpos != "":
		b, err := strconv.Atoi(e.Bitpos)
		if err != nil {
			return nil, err
		}
		v = 1 << b
	case e.Offset != "":
		n := e.Extnumber
		if n == "" {
			n = extNumber
		}
		ext, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("offset without an extension number")
		}
		off, err := strconv.ParseInt(e.Offset, 10, 64)
		if err != nil {
			return nil, err
		}
		v = 1000000000 + (ext-1)*1000 + off
		if e.Dir == "-" {
			v = -v
		}
	case e.Value != "":
		s := e.Value
		switch {
		case strings.HasPrefix(s, "\""), strings.HasSuffix(s, "F"):
			return nil, nil
		case s == "(~0U)":
			v = int64(^uint32(0))
		case s == "(~1U)":
			v = int64(^uint32(1))
		case s == "(~2U)":
			v = int64(^uint32(2))
		case s == "(~0ULL)":
			v = -1 // all 64 bits set
		default:
			var err error
			if v, err = strconv.ParseInt(s, 0, 64); err != nil {
				return nil, err
			}
		}
	default:
		return nil, nil
	}
	return &v, nil
}

var (
	commentRE = regexp.MustCompile(`(?s)<comment>.*?</comment>`)
	tagRE     = regexp.MustCompile(`<[^>]*>`)
	arrayRE   = regexp.MustCompile(`\[\s*(\w+)\s*\]`)
)

// decl is a parsed C declaration: base type, pointer depth, array length.
type decl struct {
	name  string
	ctype string
	ptr   int
	array string // "" when not an array
}

func parseDecl(m xMember) (decl, error) {
	text := tagRE.ReplaceAllString(commentRE.ReplaceAllString(m.Inner, ""), "")
	text = strings.Join(strings.Fields(text), " ")
	d := decl{name: m.Name, ctype: m.Type}
	i := strings.LastIndex(text, m.Name)
	if i < 0 || m.Type == "" {
		return d, fmt.Errorf("cannot parse declaration %q", text)
	}
	before, after := text[:i], text[i+len(m.Name):]
	d.ptr = strings.Count(before, "*")
	if strings.Contains(after, ":") {
		return d, fmt.Errorf("%s is a bit-field, which Go cannot lay out", m.Name)
	}
	arrays := arrayRE.FindAllStringSubmatch(after, -1)
	switch len(arrays) {
	case 0:
	case 1:
		d.array = arrays[0][1]
	default:
		return d, fmt.Errorf("%s is a multi-dimensional array", m.Name)
	}
	return d, nil
}
