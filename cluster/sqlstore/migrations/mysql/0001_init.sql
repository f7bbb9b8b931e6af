-- sluice rule store, schema version 1: applications and their version in
-- force (polled by watchers), every version kept, per-resource metadata,
-- instances' reports and the audit log.
CREATE TABLE IF NOT EXISTS sluice_rule_apps (
	app        VARCHAR(256) NOT NULL PRIMARY KEY,
	version    BIGINT NOT NULL DEFAULT 0,
	created_by VARCHAR(256) NOT NULL DEFAULT '',
	created_us BIGINT NOT NULL DEFAULT 0,
	updated_by VARCHAR(256) NOT NULL DEFAULT '',
	updated_us BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS sluice_rule_versions (
	app         VARCHAR(256) NOT NULL,
	version     BIGINT NOT NULL,
	doc         LONGBLOB NOT NULL,
	author      VARCHAR(256) NOT NULL,
	comment     TEXT NOT NULL,
	at_us       BIGINT NOT NULL,
	rollback_of BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (app, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS sluice_rule_buckets (
	app        VARCHAR(256) NOT NULL,
	resource   VARBINARY(1024) NOT NULL,
	kinds      VARCHAR(256) NOT NULL,
	created_by VARCHAR(256) NOT NULL,
	created_us BIGINT NOT NULL,
	created_in BIGINT NOT NULL,
	updated_by VARCHAR(256) NOT NULL,
	updated_us BIGINT NOT NULL,
	updated_in BIGINT NOT NULL,
	PRIMARY KEY (app, resource),
	KEY sluice_rule_buckets_resource (resource)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS sluice_rule_reports (
	app        VARCHAR(256) NOT NULL,
	instance   VARCHAR(256) NOT NULL,
	version    BIGINT NOT NULL,
	refused    BIGINT NOT NULL,
	err        MEDIUMTEXT NOT NULL,
	at_us      BIGINT NOT NULL,
	expires_us BIGINT NOT NULL,
	PRIMARY KEY (app, instance)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS sluice_audit (
	id      BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	at_us   BIGINT NOT NULL,
	app     VARCHAR(256) NOT NULL,
	usr     VARCHAR(256) NOT NULL,
	action  VARCHAR(256) NOT NULL,
	version BIGINT NOT NULL,
	detail  MEDIUMTEXT NOT NULL,
	KEY sluice_audit_app (app, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
