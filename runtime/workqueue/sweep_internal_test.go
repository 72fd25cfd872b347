package workqueue

import (
	"fmt"
	"strings"
	"testing"

	"github.com/laneq/laneq/queries"
)

// RegistrationPage is the registration branch's LIMIT, for the external
// tests.
const RegistrationPage = registrationPage

// The pass takes a full registration read (registrationPage rows) to mean
// more may follow: the statement's literal LIMIT must be that number.
func TestDependencySafetyPageRegistrationLimit(t *testing.T) {
	t.Parallel()
	stmts, err := queries.Statements()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if s.Name != "DependencySafetyPage" {
			continue
		}
		if want := fmt.Sprintf("LIMIT %d)", registrationPage); !strings.Contains(s.SQL, want) {
			t.Fatalf("DependencySafetyPage's registration branch has no %q (registrationPage is %d):\n%s", want, registrationPage, s.SQL)
		}
		return
	}
	t.Fatal("no DependencySafetyPage in the catalog")
}
