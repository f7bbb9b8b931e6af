-- sluice rule store, schema version 1: applications and their version in
-- force, every version kept, per-resource metadata, instances' reports,
-- the audit log, and a trigger that notifies listeners of each new version.
CREATE TABLE sluice_rule_apps (
	app        VARCHAR(256) PRIMARY KEY,
	version    BIGINT NOT NULL DEFAULT 0,
	created_by VARCHAR(256) NOT NULL DEFAULT '',
	created_us BIGINT NOT NULL DEFAULT 0,
	updated_by VARCHAR(256) NOT NULL DEFAULT '',
	updated_us BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE sluice_rule_versions (
	app         VARCHAR(256) NOT NULL,
	version     BIGINT NOT NULL,
	doc         BYTEA NOT NULL,
	author      VARCHAR(256) NOT NULL,
	comment     TEXT NOT NULL,
	at_us       BIGINT NOT NULL,
	rollback_of BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (app, version)
);
CREATE TABLE sluice_rule_buckets (
	app        VARCHAR(256) NOT NULL,
	resource   VARCHAR(1024) NOT NULL,
	kinds      VARCHAR(256) NOT NULL,
	created_by VARCHAR(256) NOT NULL,
	created_us BIGINT NOT NULL,
	created_in BIGINT NOT NULL,
	updated_by VARCHAR(256) NOT NULL,
	updated_us BIGINT NOT NULL,
	updated_in BIGINT NOT NULL,
	PRIMARY KEY (app, resource)
);
CREATE INDEX sluice_rule_buckets_resource ON sluice_rule_buckets (resource);
CREATE TABLE sluice_rule_reports (
	app        VARCHAR(256) NOT NULL,
	instance   VARCHAR(256) NOT NULL,
	version    BIGINT NOT NULL,
	refused    BIGINT NOT NULL,
	err        TEXT NOT NULL,
	at_us      BIGINT NOT NULL,
	expires_us BIGINT NOT NULL,
	PRIMARY KEY (app, instance)
);
CREATE TABLE sluice_audit (
	id      BIGSERIAL PRIMARY KEY,
	at_us   BIGINT NOT NULL,
	app     VARCHAR(256) NOT NULL,
	usr     VARCHAR(256) NOT NULL,
	action  VARCHAR(256) NOT NULL,
	version BIGINT NOT NULL,
	detail  TEXT NOT NULL
);
CREATE INDEX sluice_audit_app ON sluice_audit (app, id);
CREATE FUNCTION sluice_rule_apps_notify() RETURNS trigger AS $$
BEGIN
	IF NEW.version > 0 THEN
		PERFORM pg_notify('sluice_rules', NEW.version::text || ' ' || NEW.app);
	END IF;
	RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER sluice_rule_apps_notify AFTER INSERT OR UPDATE OF version ON sluice_rule_apps
	FOR EACH ROW EXECUTE FUNCTION sluice_rule_apps_notify();
