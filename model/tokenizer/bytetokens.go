package tokenizer

// ByteTokens returns the 256 byte-level (GPT-2) token strings in byte order:
// the base alphabet of every byte-level BPE vocabulary.
func ByteTokens() []string { return append([]string(nil), byteChars[:]...) }
