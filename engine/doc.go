// Package engine runs prefills of a model resident on a backend and hands
// back what they computed: an Engine holds the weights, a Session a KV
// cache, a Run one prefill that may be stepped point by point, captured
// (Options.Capture) and intervened on (Hooks). The layer program
// (program.go) is written once for every backend.
//
// # Batches
//
// Session.PrefillBatch (or Engine.PrefillBatch, in a session of its own)
// runs several prompts as one prefill: their rows are packed one after
// another with no padding, so that every matrix product, norm and MLP runs
// once over all of them, while RoPE, attention and the LM head's rows are
// per prompt, each prompt from position 0 against its own keys. It returns one trace per prompt, not TransformerLens's padded
// [B, T, ...] tensors: ragged prompts need no padding side or attention
// mask, a prompt's trace equals that of its prefill alone (bit for bit on
// the CPU) and every analysis of a trace applies to it; trace.Padded
// stacks a capture of the traces as [B, T, ...], padded on the right, for
// code that wants TransformerLens's shape. Hooks are called once per
// prompt with that prompt's rows, as in its prefill alone.
package engine
