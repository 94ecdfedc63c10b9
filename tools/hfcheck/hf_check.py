"""Run Strata's generated tiny models through HuggingFace transformers in
float64 and compare with Strata's traces (CPU and Vulkan backends)."""
import inspect, json, struct, sys
import numpy as np
import torch
import transformers as tf

def read_gguf(path):
    b = open(path, 'rb').read()
    off = 0
    def u(fmt):
        nonlocal off
        v = struct.unpack_from('<' + fmt, b, off); off += struct.calcsize(fmt); return v[0]
    def s():
        nonlocal off
        n = u('Q'); v = b[off:off + n].decode(); off += n; return v
    scal = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
    def val(t):
        if t == 8: return s()
        if t == 9:
            et, n = u('I'), u('Q'); return [val(et) for _ in range(n)]
        return u(scal[t])
    assert b[:4] == b'GGUF'; off = 4
    u('I'); nt, nkv = u('Q'), u('Q')
    kv = {}
    for _ in range(nkv):
        k = s(); kv[k] = val(u('I'))
    infos = []
    for _ in range(nt):
        name = s(); nd = u('I'); dims = [u('Q') for _ in range(nd)]; typ = u('I'); o = u('Q')
        infos.append((name, dims, typ, o))
    align = kv.get('general.alignment', 32)
    base = (off + align - 1) // align * align
    t = {}
    for name, dims, typ, o in infos:
        assert typ == 0, (name, typ)
        n = int(np.prod(dims))
        a = np.frombuffer(b, dtype='<f4', count=n, offset=base + o).astype(np.float64)
        t[name] = a.reshape(list(reversed(dims)))
    return kv, t

def make_config(cls, **kw):
    params = inspect.signature(cls.__init__).parameters
    rope = kw.pop('rope')
    if 'rope_parameters' in params:
        kw['rope_parameters'] = rope['v5']
    else:
        kw.update(rope['v4'])
    return cls(**{k: v for k, v in kw.items() if v is not None or k in params})

def T(x): return torch.tensor(x, dtype=torch.float64)

def gpt2(kv, t):
    L, d = kv['gpt2.block_count'], kv['gpt2.embedding_length']
    cfg = tf.GPT2Config(vocab_size=t['token_embd.weight'].shape[0], n_positions=kv['gpt2.context_length'], n_embd=d,
                        n_layer=L, n_head=kv['gpt2.attention.head_count'], n_inner=kv['gpt2.feed_forward_length'],
                        activation_function='gelu_new', layer_norm_epsilon=kv['gpt2.attention.layer_norm_epsilon'],
                        resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, tie_word_embeddings=False)
    m = tf.GPT2LMHeadModel(cfg)
    sd = {'transformer.wte.weight': t['token_embd.weight'], 'transformer.wpe.weight': t['position_embd.weight'],
          'transformer.ln_f.weight': t['output_norm.weight'], 'transformer.ln_f.bias': t['output_norm.bias'],
          'lm_head.weight': t['output.weight']}
    for l in range(L):
        p, h = f'blk.{l}.', f'transformer.h.{l}.'
        sd.update({h + 'ln_1.weight': t[p + 'attn_norm.weight'], h + 'ln_1.bias': t[p + 'attn_norm.bias'],
                   h + 'attn.c_attn.weight': t[p + 'attn_qkv.weight'].T, h + 'attn.c_attn.bias': t[p + 'attn_qkv.bias'],
                   h + 'attn.c_proj.weight': t[p + 'attn_output.weight'].T, h + 'attn.c_proj.bias': t[p + 'attn_output.bias'],
                   h + 'ln_2.weight': t[p + 'ffn_norm.weight'], h + 'ln_2.bias': t[p + 'ffn_norm.bias'],
                   h + 'mlp.c_fc.weight': t[p + 'ffn_up.weight'].T, h + 'mlp.c_fc.bias': t[p + 'ffn_up.bias'],
                   h + 'mlp.c_proj.weight': t[p + 'ffn_down.weight'].T, h + 'mlp.c_proj.bias': t[p + 'ffn_down.bias']})
    return m, sd

def gemma(kv, t, arch):
    a = arch + '.'
    L = kv[a + 'block_count']
    hd = kv[a + 'attention.key_length']
    pattern = 2 if arch == 'gemma2' else 6
    types = ['sliding_attention' if l % pattern < pattern - 1 else 'full_attention' for l in range(L)]
    theta = kv.get(a + 'rope.freq_base', 10000.0)
    common = dict(vocab_size=t['token_embd.weight'].shape[0], hidden_size=kv[a + 'embedding_length'],
                  intermediate_size=kv[a + 'feed_forward_length'], num_hidden_layers=L,
                  num_attention_heads=kv[a + 'attention.head_count'], num_key_value_heads=kv[a + 'attention.head_count_kv'],
                  head_dim=hd, hidden_activation='gelu_pytorch_tanh', max_position_embeddings=kv[a + 'context_length'],
                  rms_norm_eps=kv[a + 'attention.layer_norm_rms_epsilon'], query_pre_attn_scalar=hd,
                  sliding_window=kv[a + 'attention.sliding_window'], layer_types=types, tie_word_embeddings=True,
                  attention_dropout=0.0)
    if arch == 'gemma2':
        cfg = make_config(tf.Gemma2Config, **common, final_logit_softcapping=kv[a + 'final_logit_softcapping'],
                          attn_logit_softcapping=kv[a + 'attn_logit_softcapping'],
                          rope={'v5': {'rope_type': 'default', 'rope_theta': theta}, 'v4': {'rope_theta': theta}})
        m = tf.Gemma2ForCausalLM(cfg)
    else:
        factor = kv.get(a + 'rope.scaling.factor', 1.0)
        glob = {'rope_type': 'linear', 'factor': factor, 'rope_theta': theta}
        cfg = make_config(tf.Gemma3TextConfig, **common, final_logit_softcapping=None, attn_logit_softcapping=None,
                          rope={'v5': {'full_attention': glob, 'sliding_attention': {'rope_type': 'default', 'rope_theta': 10000.0}},
                                'v4': {'rope_theta': theta, 'rope_local_base_freq': 10000.0,
                                       'rope_scaling': {'rope_type': 'linear', 'factor': factor}}})
        m = tf.Gemma3ForCausalLM(cfg)
    # llama.cpp's converter stores Gemma's (1 + w) norm weights as 1 + w.
    sd = {'model.embed_tokens.weight': t['token_embd.weight'], 'model.norm.weight': t['output_norm.weight'] - 1,
          'lm_head.weight': t['token_embd.weight']}
    for l in range(L):
        p, h = f'blk.{l}.', f'model.layers.{l}.'
        sd.update({h + 'input_layernorm.weight': t[p + 'attn_norm.weight'] - 1,
                   h + 'post_attention_layernorm.weight': t[p + 'post_attention_norm.weight'] - 1,
                   h + 'pre_feedforward_layernorm.weight': t[p + 'ffn_norm.weight'] - 1,
                   h + 'post_feedforward_layernorm.weight': t[p + 'post_ffw_norm.weight'] - 1,
                   h + 'self_attn.q_proj.weight': t[p + 'attn_q.weight'], h + 'self_attn.k_proj.weight': t[p + 'attn_k.weight'],
                   h + 'self_attn.v_proj.weight': t[p + 'attn_v.weight'], h + 'self_attn.o_proj.weight': t[p + 'attn_output.weight'],
                   h + 'mlp.gate_proj.weight': t[p + 'ffn_gate.weight'], h + 'mlp.up_proj.weight': t[p + 'ffn_up.weight'],
                   h + 'mlp.down_proj.weight': t[p + 'ffn_down.weight']})
        if arch == 'gemma3':
            sd[h + 'self_attn.q_norm.weight'] = t[p + 'attn_q_norm.weight'] - 1
            sd[h + 'self_attn.k_norm.weight'] = t[p + 'attn_k_norm.weight'] - 1
    return m, sd

def phi3(kv, t):
    a = 'phi3.'
    L, d = kv[a + 'block_count'], kv[a + 'embedding_length']
    heads, kvh = kv[a + 'attention.head_count'], kv[a + 'attention.head_count_kv']
    orig, ctx, theta = kv[a + 'rope.scaling.original_context_length'], kv[a + 'context_length'], kv[a + 'rope.freq_base']
    long, short = t['rope_factors_long.weight'].tolist(), t['rope_factors_short.weight'].tolist()
    rope = {'rope_type': 'longrope', 'rope_theta': theta, 'long_factor': long, 'short_factor': short,
            'original_max_position_embeddings': orig, 'factor': ctx / orig}
    cfg = make_config(tf.Phi3Config, vocab_size=t['token_embd.weight'].shape[0], hidden_size=d,
                      intermediate_size=kv[a + 'feed_forward_length'], num_hidden_layers=L, num_attention_heads=heads,
                      num_key_value_heads=kvh, max_position_embeddings=ctx, original_max_position_embeddings=orig,
                      rms_norm_eps=kv[a + 'attention.layer_norm_rms_epsilon'], sliding_window=None,
                      tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
                      pad_token_id=None, bos_token_id=None, eos_token_id=None,
                      rope={'v5': rope, 'v4': {'rope_theta': theta, 'rope_scaling': {'type': 'longrope', 'long_factor': long, 'short_factor': short}}})
    m = tf.Phi3ForCausalLM(cfg)
    sd = {'model.embed_tokens.weight': t['token_embd.weight'], 'model.norm.weight': t['output_norm.weight'],
          'lm_head.weight': t['output.weight']}
    for l in range(L):
        p, h = f'blk.{l}.', f'model.layers.{l}.'
        sd.update({h + 'input_layernorm.weight': t[p + 'attn_norm.weight'],
                   h + 'post_attention_layernorm.weight': t[p + 'ffn_norm.weight'],
                   h + 'self_attn.qkv_proj.weight': t[p + 'attn_qkv.weight'],
                   h + 'self_attn.o_proj.weight': t[p + 'attn_output.weight'],
                   h + 'mlp.gate_up_proj.weight': t[p + 'ffn_up.weight'],
                   h + 'mlp.down_proj.weight': t[p + 'ffn_down.weight']})
    return m, sd

def unpermute(w, heads):
    """llama.cpp's converter permutes llama Q and K rows for ggml's adjacent-pair
    RoPE; HuggingFace rotates halves. This is its inverse."""
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)

def experts(m, sd, prefix, t, p):
    """The layer's router and experts, whichever layout this transformers uses."""
    keys = m.state_dict()
    gate, up, down = t[p + 'ffn_gate_exps.weight'], t[p + 'ffn_up_exps.weight'], t[p + 'ffn_down_exps.weight']
    router = [k for k in keys if k.startswith(prefix) and k.endswith('gate.weight') and 'experts' not in k]
    assert len(router) == 1, router
    sd[router[0]] = t[p + 'ffn_gate_inp.weight']
    base = router[0][:-len('gate.weight')] + 'experts.'
    if base + 'gate_up_proj' in keys:  # transformers 5: fused, [experts, out, in]
        gu = np.concatenate([gate, up], axis=1)
        assert tuple(keys[base + 'gate_up_proj'].shape) == gu.shape
        assert tuple(keys[base + 'down_proj'].shape) == down.shape
        sd[base + 'gate_up_proj'], sd[base + 'down_proj'] = gu, down
        return
    names = ('w1', 'w3', 'w2') if base + '0.w1.weight' in keys else ('gate_proj', 'up_proj', 'down_proj')
    for e in range(gate.shape[0]):
        for n, w in zip(names, (gate, up, down)):
            sd[f'{base}{e}.{n}.weight'] = w[e]

def moe(kv, t, arch):
    a = arch + '.'
    L, heads, kvh = kv[a + 'block_count'], kv[a + 'attention.head_count'], kv[a + 'attention.head_count_kv']
    theta = kv[a + 'rope.freq_base']
    common = dict(vocab_size=t['token_embd.weight'].shape[0], hidden_size=kv[a + 'embedding_length'],
                  intermediate_size=kv[a + 'feed_forward_length'], num_hidden_layers=L, num_attention_heads=heads,
                  num_key_value_heads=kvh, head_dim=kv[a + 'attention.key_length'],
                  max_position_embeddings=kv[a + 'context_length'], rms_norm_eps=kv[a + 'attention.layer_norm_rms_epsilon'],
                  tie_word_embeddings=False, num_experts_per_tok=kv[a + 'expert_used_count'], attention_dropout=0.0,
                  rope={'v5': {'rope_type': 'default', 'rope_theta': theta}, 'v4': {'rope_theta': theta}})
    if arch == 'qwen3moe':
        cfg = make_config(tf.Qwen3MoeConfig, **common, num_experts=kv[a + 'expert_count'],
                          moe_intermediate_size=kv[a + 'expert_feed_forward_length'], norm_topk_prob=True,
                          decoder_sparse_step=1, mlp_only_layers=[])
        m = tf.Qwen3MoeForCausalLM(cfg)
    else:
        cfg = make_config(tf.MixtralConfig, **common, num_local_experts=kv[a + 'expert_count'])
        m = tf.MixtralForCausalLM(cfg)
    sd = {'model.embed_tokens.weight': t['token_embd.weight'], 'model.norm.weight': t['output_norm.weight'],
          'lm_head.weight': t['output.weight']}
    for l in range(L):
        p, h = f'blk.{l}.', f'model.layers.{l}.'
        q, k = t[p + 'attn_q.weight'], t[p + 'attn_k.weight']
        if arch == 'llama':
            q, k = unpermute(q, heads), unpermute(k, kvh)
        sd.update({h + 'input_layernorm.weight': t[p + 'attn_norm.weight'],
                   h + 'post_attention_layernorm.weight': t[p + 'ffn_norm.weight'],
                   h + 'self_attn.q_proj.weight': q, h + 'self_attn.k_proj.weight': k,
                   h + 'self_attn.v_proj.weight': t[p + 'attn_v.weight'], h + 'self_attn.o_proj.weight': t[p + 'attn_output.weight']})
        if arch == 'qwen3moe':
            sd[h + 'self_attn.q_norm.weight'] = t[p + 'attn_q_norm.weight']
            sd[h + 'self_attn.k_norm.weight'] = t[p + 'attn_k_norm.weight']
        experts(m, sd, h, t, p)
    return m, sd

def run(path, traces, tokens):
    kv, t = read_gguf(path)
    arch = kv['general.architecture']
    build = {'gpt2': lambda: gpt2(kv, t), 'phi3': lambda: phi3(kv, t), 'qwen3moe': lambda: moe(kv, t, arch),
             'llama': lambda: moe(kv, t, arch)}  # llama with experts: Mixtral
    if arch == 'llama' and not kv.get('llama.expert_count'):
        raise NotImplementedError('dense llama is checked against transformers elsewhere')
    m, sd = build.get(arch, lambda: gemma(kv, t, arch))()
    m.config._attn_implementation = 'eager'
    if hasattr(m, 'set_experts_implementation'):  # transformers 5: grouped_mm has no float64
        m.set_experts_implementation('eager')
    m = m.double().eval()
    missing, unexpected = m.load_state_dict({k: T(v) for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not k.endswith('rotary_emb.inv_freq') and 'attn.bias' not in k and 'masked_bias' not in k]
    assert not missing and not unexpected, (missing, unexpected)
    with torch.no_grad():
        out = m(torch.tensor([tokens]), output_hidden_states=True, use_cache=False)
    hs = [h[0].numpy() for h in out.hidden_states]
    logits = out.logits[0].numpy()
    L = kv[arch + '.block_count']
    res = {'arch': arch, 'transformers': tf.__version__}
    for name, tr in traces.items():
        z = np.load(tr)
        worst = {}
        for l in range(L):  # hidden_states[l] is the input to layer l
            g = z[f'blocks.{l}.hook_resid_pre']
            worst[f'resid_pre {l}'] = float(np.abs(g - hs[l]).max() / np.abs(hs[l]).max())
        worst['logits'] = float(np.abs(z['logits'] - logits).max() / np.abs(logits).max())
        worst['same argmax'] = bool((z['logits'].argmax(-1) == logits.argmax(-1)).all())
        res[name] = worst
    return res

if __name__ == '__main__':
    tokens = [int(x) for x in sys.argv[1].split(',')]
    results = []
    for spec in sys.argv[2:]:
        path, *traces = spec.split(':')
        try:
            results.append(run(path, {tr.split('/')[-2]: tr for tr in traces}, tokens))
        except Exception as e:
            import traceback; traceback.print_exc()
            results.append({'model': path, 'error': repr(e)})
    print(json.dumps(results, indent=1))
