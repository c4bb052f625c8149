package migrations_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// dumpHeader opens every schema dump: what the file is and how to rewrite it.
const dumpHeader = `-- The schema of a database migrated to the latest migration, read from PostgreSQL's catalogs
-- by TestSchemaGolden (migrations/schemadump_test.go). Do not edit: change a migration, then
-- rewrite this file with
--     go test ./migrations -run TestSchemaGolden -update
-- and commit the two together, so that the diff shows what the migration did.
`

// userSchemas is the condition, on a pg_namespace aliased n, that keeps the schemas the
// migrations own: every one but PostgreSQL's own (pg_catalog, pg_toast, the temporary ones and
// information_schema).
const userSchemas = `n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'`

// section is one part of a schema dump. Its query returns two text columns, in the order the
// dump shows them: the object a row belongs to (rows of one object stay together, and a blank
// line separates objects) and the row's text, one or more lines of SQL.
type section struct {
	title string
	query string
}

// dumpSchema reads the schema of the database at url from its catalogs and returns it as text:
// schemas, extensions, types, relations (tables with their columns, constraints, indexes,
// triggers, rules, policies and grants; views; sequences), routines with their full source,
// owners and grants, and comments.
//
// The text depends on the schema alone, so that two databases migrated alike give the same
// bytes: objects come sorted by name in the "C" collation, and nothing shows an OID, the
// database's name, the server's version, a sequence's current value, any row, or the role that
// ran the migrations (the owner of what it created, the grantor of its grants). An owner other
// than that role is shown: the SECURITY DEFINER purges run as logbook_retention. The session's
// settings that change how definitions print are fixed first (see fixDumpSettings).
//
// dumpSchema fails when the database holds an object it cannot show (see unshownQuery), rather
// than leave it out: a golden file that cannot see a change cannot fail on it.
func dumpSchema(ctx context.Context, url string) (string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if err := fixDumpSettings(ctx, conn); err != nil {
		return "", err
	}
	if err := checkShown(ctx, conn); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(dumpHeader)
	for _, s := range dumpSections() {
		if err := writeSection(ctx, conn, &b, s); err != nil {
			return "", fmt.Errorf("schema dump, %s: %w", s.title, err)
		}
	}
	return b.String(), nil
}

// fixDumpSettings sets what changes how the catalogs' functions print definitions. An empty
// search_path qualifies every name with its schema (else a name prints bare or qualified
// depending on the caller's path); the date, interval and time zone settings fix how constants
// in defaults and checks print.
func fixDumpSettings(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `SET search_path = '';
		SET DateStyle = 'ISO, MDY';
		SET IntervalStyle = 'postgres';
		SET TimeZone = 'UTC';
		SET extra_float_digits = 1;
		SET quote_all_identifiers = off`)
	if err != nil {
		return fmt.Errorf("schema dump: fix the session's settings: %w", err)
	}
	return nil
}

// checkShown fails when the database holds objects the dump does not show, naming them.
func checkShown(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, unshownQuery())
	if err != nil {
		return fmt.Errorf("schema dump: look for objects it cannot show: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("schema dump: look for objects it cannot show: %w", err)
	}
	if len(names) > 0 {
		return fmt.Errorf("schema dump cannot show %s: teach dumpSections (migrations/schemadump_test.go) to", strings.Join(names, ", "))
	}
	return nil
}

// writeSection runs s's query and writes its rows under a heading, a blank line between
// objects; a section with no rows says so.
func writeSection(ctx context.Context, conn *pgx.Conn, b *strings.Builder, s section) error {
	rows, err := conn.Query(ctx, s.query)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(b, "\n-- %s\n", s.title)
	n := 0
	var last string
	for rows.Next() {
		var object, text string
		if err := rows.Scan(&object, &text); err != nil {
			return err
		}
		if n == 0 || object != last {
			b.WriteString("\n")
		}
		b.WriteString(text + "\n")
		last = object
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n == 0 {
		b.WriteString("\n-- (none)\n")
	}
	return nil
}

// dumpSections lists the parts of a schema dump in the order it shows them.
func dumpSections() []section {
	return []section{
		{"schemas", `
SELECT n.nspname::text, format('CREATE SCHEMA %I;', n.nspname)
FROM pg_namespace n
WHERE ` + userSchemas + `
ORDER BY n.nspname COLLATE "C"`},

		{"extensions", `
SELECT '', format('CREATE EXTENSION %I WITH SCHEMA %I;', x.extname, n.nspname)
FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
WHERE x.extname <> 'plpgsql'
ORDER BY x.extname COLLATE "C"`},

		{"types", typesQuery()},
		{"tables, views and sequences", relationsQuery()},
		{"functions and procedures", routinesQuery()},

		{"comments", `
SELECT o.identity, format('COMMENT ON %s %s IS %L;',
	upper(replace(replace(o.type, 'table column', 'column'), 'table constraint', 'constraint')), o.identity, d.description)
FROM pg_description d, LATERAL pg_identify_object(d.classoid, d.objoid, d.objsubid) o
WHERE o.schema IS NOT NULL AND o.schema <> 'information_schema' AND o.schema !~ '^pg_'
	AND NOT EXISTS (SELECT FROM pg_depend x WHERE x.classid = d.classoid AND x.objid = d.objoid AND x.deptype = 'e')
ORDER BY o.type COLLATE "C", o.identity COLLATE "C"`},
	}
}

// notExtensionMember is the condition that an object (its catalog and OID) is not part of an
// extension: CREATE EXTENSION makes those, not the migrations.
func notExtensionMember(catalog, oid string) string {
	return fmt.Sprintf(`NOT EXISTS (SELECT FROM pg_depend x WHERE x.classid = '%s'::regclass AND x.objid = %s AND x.deptype = 'e')`, catalog, oid)
}

// columnDef renders the column of a pg_attribute aliased a as it reads in CREATE TABLE (or in
// CREATE TYPE, where the clauses after the type are always empty).
const columnDef = `format('    %I %s', a.attname, format_type(a.atttypid, a.atttypmod))
	|| CASE WHEN a.attcollation <> 0 AND a.attcollation <> (SELECT ty.typcollation FROM pg_type ty WHERE ty.oid = a.atttypid)
		THEN (SELECT format(' COLLATE %I.%I', cn.nspname, co.collname)
			FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace WHERE co.oid = a.attcollation)
		ELSE '' END
	|| CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY' WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END
	|| coalesce((SELECT CASE a.attgenerated
			WHEN 's' THEN format(' GENERATED ALWAYS AS (%s) STORED', pg_get_expr(d.adbin, d.adrelid))
			ELSE ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid) END
		FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum), '')
	|| CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END`

// typesQuery shows the composite, enum and domain types (a table's row type goes with its
// table).
func typesQuery() string {
	return `
SELECT format('%I.%I', n.nspname, t.typname), CASE t.typtype
	WHEN 'c' THEN format(E'CREATE TYPE %I.%I AS (\n%s\n);', n.nspname, t.typname,
		(SELECT string_agg(` + columnDef + `, E',\n' ORDER BY a.attnum)
		FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped))
	WHEN 'e' THEN format('CREATE TYPE %I.%I AS ENUM (%s);', n.nspname, t.typname,
		(SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid))
	ELSE format('CREATE DOMAIN %I.%I AS %s%s%s%s;', n.nspname, t.typname, format_type(t.typbasetype, t.typtypmod),
		CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END,
		coalesce(' DEFAULT ' || t.typdefault, ''),
		(SELECT coalesce(string_agg(format(' CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)), '' ORDER BY c.conname COLLATE "C"), '')
		FROM pg_constraint c WHERE c.contypid = t.oid))
	END
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE ` + userSchemas + ` AND ` + notExtensionMember("pg_type", "t.oid") + `
	AND (t.typtype IN ('e', 'd') OR t.typtype = 'c' AND (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c')
ORDER BY n.nspname COLLATE "C", t.typname COLLATE "C"`
}

// grants renders the ACL acl of an object owned by owner as GRANT statements, one row (grantee,
// stmt) per grantee and grant option. target is the SQL text of what the grant is on ('TABLE ' ||
// r.qname, say) and suffix follows each privilege (a column's name, for column privileges). The
// owner's own rights are left out, and so is the grantor: the role that ran the migrations.
func grants(acl, owner, target, suffix string) string {
	return `SELECT CASE g.grantee WHEN 0 THEN '' ELSE pg_get_userbyid(g.grantee)::text END AS grantee,
		format('GRANT %s ON %s TO %s%s;',
			string_agg(g.privilege_type || ` + suffix + `, ', ' ORDER BY array_position(ARRAY['SELECT', 'INSERT', 'UPDATE',
				'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER', 'EXECUTE', 'USAGE'], g.privilege_type), g.privilege_type COLLATE "C"),
			` + target + `,
			CASE g.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
			CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END) AS stmt
	FROM aclexplode(` + acl + `) g
	WHERE g.grantee <> ` + owner + `
	GROUP BY g.grantee, g.is_grantable`
}

// relationsQuery shows each table, view, materialized view and sequence, followed by what
// belongs to it: indexes (but those of primary key, unique and exclusion constraints, which
// show as the constraints), triggers, rules, row security and policies, grants and an owner
// other than the role that ran the migrations.
func relationsQuery() string {
	return `
WITH rel AS (
	SELECT c.oid, c.relname, c.relkind, c.relowner, c.relacl, c.relpersistence, c.reloptions,
		c.relrowsecurity, c.relforcerowsecurity, n.nspname, format('%I.%I', n.nspname, c.relname) AS qname
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE ` + userSchemas + ` AND c.relkind IN ('r', 'v', 'm', 'S') AND ` + notExtensionMember("pg_class", "c.oid") + `
), part AS (
	SELECT r.oid, 0 AS k, '' AS sk, CASE r.relkind
		WHEN 'r' THEN format(E'CREATE %sTABLE %s (\n%s\n)%s;',
			CASE r.relpersistence WHEN 'u' THEN 'UNLOGGED ' ELSE '' END, r.qname,
			concat_ws(E',\n',
				(SELECT string_agg(` + columnDef + `, E',\n' ORDER BY a.attnum)
				FROM pg_attribute a WHERE a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped),
				(SELECT string_agg(format('    CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)), E',\n' ORDER BY c.conname COLLATE "C")
				FROM pg_constraint c WHERE c.conrelid = r.oid AND c.contype NOT IN ('t', 'n'))),
			coalesce(' WITH (' || array_to_string(r.reloptions, ', ') || ')', ''))
		WHEN 'S' THEN (SELECT format('CREATE SEQUENCE %s AS %s START WITH %s INCREMENT BY %s MINVALUE %s MAXVALUE %s CACHE %s%s;',
				r.qname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache,
				CASE WHEN s.seqcycle THEN ' CYCLE' ELSE '' END)
			FROM pg_sequence s WHERE s.seqrelid = r.oid)
		ELSE format(E'CREATE %sVIEW %s%s AS\n%s',
			CASE r.relkind WHEN 'm' THEN 'MATERIALIZED ' ELSE '' END, r.qname,
			coalesce(' WITH (' || array_to_string(r.reloptions, ', ') || ')', ''),
			pg_get_viewdef(r.oid, true))
		END AS text
	FROM rel r
	UNION ALL
	SELECT r.oid, 1, '', format('ALTER SEQUENCE %s OWNED BY %s.%I;%s', r.qname, d.refobjid::regclass, a.attname,
			CASE d.deptype WHEN 'i' THEN ' -- the column''s identity' ELSE '' END)
	FROM rel r
		JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = r.oid AND d.refclassid = 'pg_class'::regclass
			AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0
		JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
	WHERE r.relkind = 'S'
	UNION ALL
	SELECT r.oid, 2, i.relname, pg_get_indexdef(i.oid) || ';'
	FROM rel r JOIN pg_index x ON x.indrelid = r.oid JOIN pg_class i ON i.oid = x.indexrelid
	WHERE NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = r.oid AND c.conindid = i.oid AND c.contype IN ('p', 'u', 'x'))
	UNION ALL
	SELECT r.oid, 3, t.tgname, pg_get_triggerdef(t.oid) || ';' || CASE t.tgenabled
			WHEN 'D' THEN format(E'\nALTER TABLE %s DISABLE TRIGGER %I;', r.qname, t.tgname)
			WHEN 'R' THEN format(E'\nALTER TABLE %s ENABLE REPLICA TRIGGER %I;', r.qname, t.tgname)
			WHEN 'A' THEN format(E'\nALTER TABLE %s ENABLE ALWAYS TRIGGER %I;', r.qname, t.tgname)
			ELSE '' END
	FROM rel r JOIN pg_trigger t ON t.tgrelid = r.oid
	WHERE NOT t.tgisinternal
	UNION ALL
	SELECT r.oid, 4, w.rulename, pg_get_ruledef(w.oid)
	FROM rel r JOIN pg_rewrite w ON w.ev_class = r.oid
	WHERE w.rulename <> '_RETURN'
	UNION ALL
	SELECT r.oid, 5, '', format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY;', r.qname) FROM rel r WHERE r.relrowsecurity
	UNION ALL
	SELECT r.oid, 6, '', format('ALTER TABLE %s FORCE ROW LEVEL SECURITY;', r.qname) FROM rel r WHERE r.relforcerowsecurity
	UNION ALL
	SELECT r.oid, 7, p.polname, format('CREATE POLICY %I ON %s AS %s FOR %s TO %s%s%s;', p.polname, r.qname,
			CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
			CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
			(SELECT string_agg(CASE o WHEN 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(o)) END, ', '
				ORDER BY CASE o WHEN 0 THEN '' ELSE pg_get_userbyid(o)::text END COLLATE "C")
			FROM unnest(p.polroles) o),
			coalesce(' USING (' || pg_get_expr(p.polqual, p.polrelid) || ')', ''),
			coalesce(' WITH CHECK (' || pg_get_expr(p.polwithcheck, p.polrelid) || ')', ''))
	FROM rel r JOIN pg_policy p ON p.polrelid = r.oid
	UNION ALL
	SELECT r.oid, 8, g.grantee, g.stmt
	FROM rel r, LATERAL (` + grants("r.relacl", "r.relowner", `CASE r.relkind WHEN 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END || r.qname`, "''") + `) g
	UNION ALL
	SELECT r.oid, 9, a.attname || ' ' || g.grantee, g.stmt
	FROM rel r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attacl IS NOT NULL,
		LATERAL (` + grants("a.attacl", "r.relowner", "'TABLE ' || r.qname", "format(' (%I)', a.attname)") + `) g
	UNION ALL
	SELECT r.oid, 10, '', format('ALTER TABLE %s OWNER TO %I;', r.qname, pg_get_userbyid(r.relowner))
	FROM rel r WHERE pg_get_userbyid(r.relowner) <> current_user
)
SELECT r.qname, p.text
FROM part p JOIN rel r ON r.oid = p.oid
ORDER BY r.nspname COLLATE "C", r.relname COLLATE "C", p.k, p.sk COLLATE "C"`
}

// routinesQuery shows each function and procedure as pg_get_functiondef prints it (the whole
// source, with its language, volatility, security and settings), then an owner other than the
// role that ran the migrations and the grants. A routine whose ACL does not grant PUBLIC its
// default EXECUTE shows the REVOKE that took it.
func routinesQuery() string {
	return `
WITH fn AS (
	SELECT p.oid, p.proowner, p.proacl, n.nspname, p.proname, pg_get_function_identity_arguments(p.oid) AS args,
		format('%I.%I(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid)) AS sig
	FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	WHERE ` + userSchemas + ` AND ` + notExtensionMember("pg_proc", "p.oid") + `
), part AS (
	SELECT f.oid, 0 AS k, '' AS sk, rtrim(pg_get_functiondef(f.oid), E'\n') || ';' AS text FROM fn f
	UNION ALL
	SELECT f.oid, 1, '', format('ALTER ROUTINE %s OWNER TO %I;', f.sig, pg_get_userbyid(f.proowner))
	FROM fn f WHERE pg_get_userbyid(f.proowner) <> current_user
	UNION ALL
	SELECT f.oid, 2, '', format('REVOKE ALL ON ROUTINE %s FROM PUBLIC;', f.sig)
	FROM fn f WHERE f.proacl IS NOT NULL AND NOT EXISTS (SELECT FROM aclexplode(f.proacl) g WHERE g.grantee = 0)
	UNION ALL
	SELECT f.oid, 3, g.grantee, g.stmt
	FROM fn f, LATERAL (` + grants("f.proacl", "f.proowner", "'ROUTINE ' || f.sig", "''") + `) g
)
SELECT f.sig, p.text
FROM part p JOIN fn f ON f.oid = p.oid
ORDER BY f.nspname COLLATE "C", f.proname COLLATE "C", f.args COLLATE "C", p.k, p.sk COLLATE "C"`
}

// unshownQuery names the objects of the migrations' schemas (and of the database as a whole)
// that dumpSections does not show: partitioned, partition, inheriting and foreign tables,
// aggregates, base, range and pseudo types, operators and their classes and families,
// collations, conversions, text search objects, extended statistics, default privileges, event
// triggers and publications. None exists today; one that appears fails the dump instead of
// slipping past the golden file.
func unshownQuery() string {
	return `
WITH us AS (SELECT n.oid FROM pg_namespace n WHERE ` + userSchemas + `), obj AS (
	SELECT 'pg_class'::regclass AS classid, c.oid AS objid FROM pg_class c
	WHERE c.relnamespace IN (SELECT oid FROM us)
		AND (c.relkind IN ('p', 'f') OR c.relispartition OR EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid))
	UNION ALL SELECT 'pg_proc'::regclass, p.oid FROM pg_proc p WHERE p.pronamespace IN (SELECT oid FROM us) AND p.prokind = 'a'
	UNION ALL SELECT 'pg_type'::regclass, t.oid FROM pg_type t
	WHERE t.typnamespace IN (SELECT oid FROM us) AND t.typtype IN ('b', 'r', 'm', 'p') AND NOT (t.typtype = 'b' AND t.typelem <> 0)
	UNION ALL SELECT 'pg_operator'::regclass, o.oid FROM pg_operator o WHERE o.oprnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_opclass'::regclass, o.oid FROM pg_opclass o WHERE o.opcnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_opfamily'::regclass, o.oid FROM pg_opfamily o WHERE o.opfnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_collation'::regclass, o.oid FROM pg_collation o WHERE o.collnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_conversion'::regclass, o.oid FROM pg_conversion o WHERE o.connamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_ts_config'::regclass, o.oid FROM pg_ts_config o WHERE o.cfgnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_ts_dict'::regclass, o.oid FROM pg_ts_dict o WHERE o.dictnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_ts_parser'::regclass, o.oid FROM pg_ts_parser o WHERE o.prsnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_ts_template'::regclass, o.oid FROM pg_ts_template o WHERE o.tmplnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_statistic_ext'::regclass, o.oid FROM pg_statistic_ext o WHERE o.stxnamespace IN (SELECT oid FROM us)
	UNION ALL SELECT 'pg_default_acl'::regclass, o.oid FROM pg_default_acl o
	UNION ALL SELECT 'pg_event_trigger'::regclass, o.oid FROM pg_event_trigger o
	UNION ALL SELECT 'pg_publication'::regclass, o.oid FROM pg_publication o
)
SELECT format('%s %s', i.type, i.identity) AS name
FROM obj, LATERAL pg_identify_object(obj.classid, obj.objid, 0) i
WHERE NOT EXISTS (SELECT FROM pg_depend x WHERE x.classid = obj.classid AND x.objid = obj.objid AND x.deptype = 'e')
ORDER BY name COLLATE "C"`
}
