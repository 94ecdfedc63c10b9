package human

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 tokens"}, {1, "1 token"}, {2, "2 tokens"}, {-1, "-1 tokens"}} {
		if got := Count(c.n, "token"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
