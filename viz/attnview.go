package viz

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/stratalab/strata/trace"
)

// AttentionView is an interactive view of attention, after CircuitsVis's
// attention_heads: pick a layer and a head; hovering a token colours, in the
// top row, the tokens it attends to and, in the bottom row, the tokens that
// attend to it, each by the attention weight (shown on hover). It reads
// blocks.L.attn.hook_pattern for the layers given (every captured layer
// when none are).
func AttentionView(tr *trace.Trace, layers ...int) (HTML, error) {
	if tr == nil {
		return HTML{}, nilTrace("AttentionView")
	}
	if len(layers) == 0 {
		for l := range tr.Model.Layers {
			if tr.Has(fmt.Sprintf("blocks.%d.attn.hook_pattern", l)) {
				layers = append(layers, l)
			}
		}
		if len(layers) == 0 {
			return HTML{}, fmt.Errorf("viz: AttentionView needs attention patterns, which this trace lacks: capture %q", "blocks.*.attn.hook_pattern")
		}
	}
	T := len(tr.Tokens)
	type layerData struct {
		Layer   int           `json:"layer"`
		Pattern [][][]float64 `json:"pattern"` // [head][query][key]
	}
	data := struct {
		Keys   []string    `json:"keys"`
		Pos0   int         `json:"pos0"`
		Layers []layerData `json:"layers"`
	}{}
	var heads, keys int
	for _, l := range layers {
		if err := checkLayer(tr, "AttentionView", l); err != nil {
			return HTML{}, err
		}
		name := fmt.Sprintf("blocks.%d.attn.hook_pattern", l)
		x, err := copyOf(tr, name)
		if err != nil {
			return HTML{}, fmt.Errorf("viz: AttentionView: %w; capture %q", err, "blocks.*.attn.hook_pattern")
		}
		if len(x.Shape) != 3 || x.Shape[1] != T || x.Shape[2] < T || len(x.Data) != x.Shape[0]*x.Shape[1]*x.Shape[2] {
			return HTML{}, fmt.Errorf("viz: AttentionView: %s has shape %v, want [heads, %d, pos0+%d]", name, x.Shape, T, T)
		}
		heads, keys = x.Shape[0], x.Shape[2]
		ld := layerData{Layer: l, Pattern: make([][][]float64, heads)}
		for h := range heads {
			ld.Pattern[h] = make([][]float64, T)
			for q := range T {
				row := make([]float64, keys)
				for k := range keys {
					// Four decimals are what a colour and a tooltip show.
					row[k] = math.Round(float64(x.At(h, q, k))*1e4) / 1e4
				}
				ld.Pattern[h][q] = row
			}
		}
		data.Layers = append(data.Layers, ld)
	}
	data.Pos0 = keys - T
	for k := range keys {
		if k < data.Pos0 {
			data.Keys = append(data.Keys, fmt.Sprintf("#%d", k))
		} else {
			data.Keys = append(data.Keys, showPiece(tr.Pieces[k-data.Pos0]))
		}
	}
	js, err := json.Marshal(data)
	if err != nil {
		return HTML{}, err
	}
	id := viewID("attn", js)
	var b strings.Builder
	fmt.Fprintf(&b, `<div id="%s" class="strata-attn" style="font:13px sans-serif">`, id)
	b.WriteString(`<div class="controls">layer <select class="layer">`)
	for i, l := range layers {
		fmt.Fprintf(&b, `<option value="%d">%d</option>`, i, l)
	}
	b.WriteString(`</select> head`)
	for h := range heads {
		fmt.Fprintf(&b, ` <button class="head" data-h="%d">%d</button>`, h, h)
	}
	b.WriteString(`</div>`)
	// What the shading means, as a figure's colour bar says it: the red
	// of the figures' sequential scale, its strength the weight.
	b.WriteString(`<div class="legend" style="margin-top:6px;color:#555">shade: attention weight, 0 <span style="display:inline-block;width:120px;height:10px;vertical-align:middle;border:1px solid #ddd;background:linear-gradient(to right,rgba(178,24,43,0),rgba(178,24,43,1))"></span> 1 (a token's tooltip gives it)</div>`)
	b.WriteString(`<div style="margin-top:6px;color:#555">attends to (from the hovered token):</div><div class="row to" style="font-family:monospace;line-height:1.9"></div>`)
	b.WriteString(`<div style="margin-top:6px;color:#555">attended by (to the hovered token):</div><div class="row from" style="font-family:monospace;line-height:1.9"></div>`)
	b.WriteString(`<div class="status" style="margin-top:6px;color:#555">hover a token</div>`)
	fmt.Fprintf(&b, "<script>(function(){\nconst root=%s, D=%s;\n%s})();</script></div>", viewRoot(id), js, attnScript)
	return HTML{Title: "attention " + tr.Model.Name, Body: b.String()}, nil
}

// attnScript draws the rows and reacts to hovers. Each token span keeps its
// weight in data-w, which the browser test reads back.
const attnScript = `
let L=0, H=0, focus=-1;
const sel=root.querySelector('.layer'), heads=root.querySelectorAll('.head');
const rows={to:root.querySelector('.row.to'), from:root.querySelector('.row.from')};
const status=root.querySelector('.status');
function draw(){
  for(const kind of ['to','from']){
    const row=rows[kind]; row.textContent='';
    D.keys.forEach((k,i)=>{
      const s=document.createElement('span');
      s.textContent=k; s.dataset.i=i;
      s.style.cssText='border:1px solid #ddd;margin:0 1px;padding:0 2px;cursor:default';
      s.addEventListener('mouseover',()=>{focus=i;paint();});
      row.appendChild(s); row.append('\u200b'); // a place to wrap between tokens
      if(k.endsWith('\u21b5')) row.appendChild(document.createElement('br'));
    });
  }
  heads.forEach(b=>b.style.fontWeight=(+b.dataset.h===H)?'bold':'normal');
  paint();
}
function weight(q,k){
  const P=D.layers[L].pattern[H], r=q-D.pos0;
  return (r>=0 && r<P.length) ? P[r][k] : NaN;
}
function paint(){
  for(const kind of ['to','from']){
    rows[kind].querySelectorAll('span').forEach(s=>{
      const j=+s.dataset.i;
      let w=NaN;
      if(focus>=0) w = kind==='to' ? weight(focus,j) : weight(j,focus);
      s.dataset.w = isNaN(w) ? '' : w;
      s.title = isNaN(w) ? '' : (kind==='to' ? 'attention from the hovered token: ' : 'attention to the hovered token: ')+w.toFixed(4);
      s.style.background = isNaN(w) ? 'transparent' : 'rgba(178,24,43,'+w+')';
      s.style.outline = j===focus ? '2px solid #e08a00' : 'none'; // its own weight stays visible
      s.style.color = w>0.6 ? 'white' : 'black';
    });
  }
  if(focus>=0) status.textContent='layer '+D.layers[L].layer+' head '+H+', token '+focus+' '+JSON.stringify(D.keys[focus]);
}
sel.addEventListener('change',()=>{L=+sel.value;draw();});
heads.forEach(b=>b.addEventListener('click',()=>{H=+b.dataset.h;draw();}));
draw();
`
