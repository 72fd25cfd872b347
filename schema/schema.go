// Package schema holds laneq's goose migrations and applies them.
//
// Every migration file holds one DDL statement and is marked NO TRANSACTION:
// TiDB commits DDL implicitly, so a multi-statement migration could stop
// half-applied. With one statement per file a failed migration leaves nothing
// behind and goose records nothing for it.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/pressly/goose/v3"
)

// VersionTable is the table goose uses to record applied migrations. It is the
// only table a fully migrated-down database still holds.
const VersionTable = "laneq_schema_version"

//go:embed *.sql
var migrations embed.FS

// Migrations returns the embedded migration files.
func Migrations() embed.FS { return migrations }

// NewProvider returns a goose provider for laneq's migrations on db, using the
// TiDB dialect. Callers that only need "bring the schema up to date" should
// use Up.
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	opts = append([]goose.ProviderOption{goose.WithTableName(VersionTable)}, opts...)
	p, err := goose.NewProvider(goose.DialectTiDB, db, migrations, opts...)
	if err != nil {
		return nil, fmt.Errorf("schema: create migration provider: %w", err)
	}
	return p, nil
}

// Up applies every pending migration and returns how many it applied. It is
// idempotent: on an up-to-date database it applies nothing and returns 0.
//
// Run it from one deployer at a time; goose has no migration lock on TiDB.
func Up(ctx context.Context, db *sql.DB) (int, error) {
	p, err := NewProvider(db)
	if err != nil {
		return 0, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return len(results), fmt.Errorf("schema: apply migrations: %w", err)
	}
	return len(results), nil
}

// Pending reports how many migrations db has not applied yet (0: the schema
// is current). It applies nothing; on a database laneq never migrated it
// reports every migration (goose creates its empty version table, VersionTable,
// to read it).
func Pending(ctx context.Context, db *sql.DB) (int, error) {
	p, err := NewProvider(db)
	if err != nil {
		return 0, err
	}
	status, err := p.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("schema: read migration status: %w", err)
	}
	pending := 0
	for _, s := range status {
		if s.State == goose.StatePending {
			pending++
		}
	}
	return pending, nil
}
