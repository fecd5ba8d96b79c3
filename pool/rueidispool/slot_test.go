package rueidispool

import "testing"

// A cluster client's builder panics on keys of different slots: Eval
// answers CROSSSLOT itself instead, when oneSlot says so.
func TestOneSlot(t *testing.T) {
	for keys, want := range map[*[]string]bool{
		{}:                                  true,
		{"a"}:                               true,
		{"{acct}:7", "{acct}:3"}:            true,
		{"lock:acct:7", "lock:acct:3"}:      false,
		{"k", "k:{k}waiters", "k:{k}fence"}: true,
	} {
		if got := oneSlot(*keys); got != want {
			t.Errorf("oneSlot(%q) = %v, want %v", *keys, got, want)
		}
	}
}
