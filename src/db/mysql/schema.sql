-- MySQL/MariaDB DDL, as Airflow 3.3.2 leaves it (`SHOW CREATE TABLE` on MariaDB 10.11 gives
-- back exactly Airflow's tables). Every table names its engine, charset and collation, so a
-- sandbox does not depend on the defaults of the database it is created in.
--
-- `JSON` is what SQLAlchemy emits: MariaDB turns it into `LONGTEXT … utf8mb4_bin CHECK
-- (json_valid(…))`, MySQL keeps a native JSON column, as under Airflow. `UUID` (dag_version's
-- key) is MariaDB 10.7's native type; on servers without it the sandbox uses `CHAR(32)`,
-- which is what SQLAlchemy creates there (see [`MYSQL_UUID_FALLBACK`]). The indexes are
-- declared inline, in the order Airflow's migrations leave them, and the two foreign keys of
-- `dag_run` that have no index of their own get one named after the constraint, as InnoDB
-- names it when it adds one by itself.

-- Key-only stand-ins for the tables dag_run's foreign keys name: InnoDB refuses a foreign
-- key to a table that does not exist.
CREATE TABLE log_template (
	id INTEGER NOT NULL AUTO_INCREMENT,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE backfill (
	id INTEGER NOT NULL AUTO_INCREMENT,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE dag_version (
	id UUID NOT NULL,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE dag_run (
	id INTEGER NOT NULL AUTO_INCREMENT,
	dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	queued_at TIMESTAMP(6) NULL DEFAULT NULL,
	logical_date TIMESTAMP(6) NULL DEFAULT NULL,
	start_date TIMESTAMP(6) NULL DEFAULT NULL,
	end_date TIMESTAMP(6) NULL DEFAULT NULL,
	state VARCHAR(50) DEFAULT NULL,
	run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	creating_job_id INTEGER DEFAULT NULL,
	run_type VARCHAR(50) NOT NULL,
	triggered_by VARCHAR(50) DEFAULT NULL,
	triggering_user_name VARCHAR(512) DEFAULT NULL,
	conf JSON DEFAULT NULL,
	data_interval_start TIMESTAMP(6) NULL DEFAULT NULL,
	data_interval_end TIMESTAMP(6) NULL DEFAULT NULL,
	run_after TIMESTAMP(6) NOT NULL,
	last_scheduling_decision TIMESTAMP(6) NULL DEFAULT NULL,
	log_template_id INTEGER DEFAULT NULL,
	created_at TIMESTAMP(6) NULL DEFAULT NULL,
	updated_at TIMESTAMP(6) NULL DEFAULT NULL,
	clear_number INTEGER NOT NULL DEFAULT 0,
	backfill_id INTEGER DEFAULT NULL,
	bundle_version VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	scheduled_by_job_id INTEGER DEFAULT NULL,
	context_carrier JSON DEFAULT NULL,
	span_status VARCHAR(250) NOT NULL DEFAULT 'not_started',
	created_dag_version_id UUID DEFAULT NULL,
	partition_key VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	partition_date TIMESTAMP(6) NULL DEFAULT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY dag_run_dag_id_run_id_key (dag_id, run_id),
	UNIQUE KEY dag_run_dag_id_logical_date_key (dag_id, logical_date),
	KEY task_instance_log_template_id_fkey (log_template_id),
	KEY dag_run_backfill_id_fkey (backfill_id),
	KEY idx_dag_run_running_dags (state, dag_id),
	KEY idx_dag_run_run_after (run_after),
	KEY idx_dag_run_dag_id (dag_id),
	KEY idx_dag_run_created_dag_version_id (created_dag_version_id),
	KEY idx_dag_run_queued_dags (state, dag_id),
	KEY dag_id_state (dag_id, state),
	CONSTRAINT created_dag_version_id_fkey FOREIGN KEY (created_dag_version_id) REFERENCES dag_version (id) ON DELETE SET NULL,
	CONSTRAINT dag_run_backfill_id_fkey FOREIGN KEY (backfill_id) REFERENCES backfill (id),
	CONSTRAINT task_instance_log_template_id_fkey FOREIGN KEY (log_template_id) REFERENCES log_template (id) ON DELETE NO ACTION
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE asset (
	id INTEGER NOT NULL AUTO_INCREMENT,
	name VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	uri VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	`group` VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	extra JSON NOT NULL,
	created_at TIMESTAMP(6) NOT NULL,
	updated_at TIMESTAMP(6) NOT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY idx_asset_name_uri_unique (name, uri)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE asset_active (
	name VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	uri VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	PRIMARY KEY (name, uri),
	UNIQUE KEY idx_asset_active_uri_unique (uri),
	UNIQUE KEY idx_asset_active_name_unique (name),
	CONSTRAINT asset_active_asset_name_uri_fkey FOREIGN KEY (name, uri) REFERENCES asset (name, uri) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- task_instance's foreign keys name `trigger` too; a key-only stand-in, like the others.
CREATE TABLE `trigger` (
	id INTEGER NOT NULL AUTO_INCREMENT,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE task_instance (
	id UUID NOT NULL,
	task_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	map_index INTEGER NOT NULL DEFAULT -1,
	start_date TIMESTAMP(6) NULL DEFAULT NULL,
	end_date TIMESTAMP(6) NULL DEFAULT NULL,
	duration FLOAT DEFAULT NULL,
	state VARCHAR(20) DEFAULT NULL,
	try_number INTEGER NOT NULL,
	max_tries INTEGER NOT NULL DEFAULT -1,
	hostname VARCHAR(1000) DEFAULT NULL,
	unixname VARCHAR(1000) DEFAULT NULL,
	pool VARCHAR(256) NOT NULL,
	pool_slots INTEGER NOT NULL,
	queue VARCHAR(256) DEFAULT NULL,
	priority_weight INTEGER DEFAULT NULL,
	operator VARCHAR(1000) DEFAULT NULL,
	custom_operator_name VARCHAR(1000) DEFAULT NULL,
	queued_dttm TIMESTAMP(6) NULL DEFAULT NULL,
	scheduled_dttm TIMESTAMP(6) NULL DEFAULT NULL,
	queued_by_job_id INTEGER DEFAULT NULL,
	last_heartbeat_at TIMESTAMP(6) NULL DEFAULT NULL,
	pid INTEGER DEFAULT NULL,
	executor VARCHAR(1000) DEFAULT NULL,
	executor_config BLOB DEFAULT NULL,
	updated_at TIMESTAMP(6) NULL DEFAULT NULL,
	rendered_map_index VARCHAR(250) DEFAULT NULL,
	context_carrier JSON DEFAULT NULL,
	span_status VARCHAR(250) NOT NULL DEFAULT 'not_started',
	external_executor_id TEXT DEFAULT NULL,
	trigger_id INTEGER DEFAULT NULL,
	trigger_timeout TIMESTAMP(6) NULL DEFAULT NULL,
	next_method VARCHAR(1000) DEFAULT NULL,
	next_kwargs JSON DEFAULT NULL,
	task_display_name VARCHAR(2000) DEFAULT NULL,
	dag_version_id UUID DEFAULT NULL,
	retry_delay_override FLOAT DEFAULT NULL,
	retry_reason VARCHAR(500) DEFAULT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY task_instance_composite_key (dag_id, task_id, run_id, map_index),
	KEY ti_trigger_id (trigger_id),
	KEY ti_state (state),
	KEY ti_dag_run (dag_id, run_id),
	KEY ti_pool (pool, state, priority_weight),
	KEY ti_heartbeat (last_heartbeat_at),
	KEY ti_dag_version_id (dag_version_id),
	KEY ti_state_lkp (dag_id, task_id, run_id, state),
	KEY ti_dag_state (dag_id, state),
	CONSTRAINT task_instance_dag_run_fkey FOREIGN KEY (dag_id, run_id) REFERENCES dag_run (dag_id, run_id) ON DELETE CASCADE,
	CONSTRAINT task_instance_dag_version_id_fkey FOREIGN KEY (dag_version_id) REFERENCES dag_version (id),
	CONSTRAINT task_instance_trigger_id_fkey FOREIGN KEY (trigger_id) REFERENCES `trigger` (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE task_state_store (
	id INTEGER NOT NULL AUTO_INCREMENT,
	dag_run_id INTEGER NOT NULL,
	task_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	map_index INTEGER NOT NULL DEFAULT -1,
	`key` VARCHAR(512) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	value MEDIUMTEXT NOT NULL,
	updated_at TIMESTAMP(6) NOT NULL,
	expires_at TIMESTAMP(6) NULL DEFAULT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY task_state_store_uq (dag_run_id, task_id, map_index, `key`),
	KEY idx_task_state_store_lookup (dag_id, run_id, task_id, map_index),
	KEY idx_task_state_store_expires_at (expires_at),
	CONSTRAINT task_state_store_dag_run_fkey FOREIGN KEY (dag_run_id) REFERENCES dag_run (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE asset_state_store (
	asset_id INTEGER NOT NULL,
	`key` VARCHAR(512) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	value MEDIUMTEXT NOT NULL,
	updated_at TIMESTAMP(6) NOT NULL,
	last_updated_by_kind VARCHAR(16) DEFAULT NULL,
	last_updated_by_dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	last_updated_by_run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	last_updated_by_task_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	last_updated_by_map_index INTEGER DEFAULT NULL,
	PRIMARY KEY (asset_id, `key`),
	CONSTRAINT asset_state_store_asset_fkey FOREIGN KEY (asset_id) REFERENCES asset (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL,
	PRIMARY KEY (version_num)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- The sandbox's marker: present only in databases made by `state-store sandbox create`.
CREATE TABLE state_store_sandbox (created_at TIMESTAMP(6) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
