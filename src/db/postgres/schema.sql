-- PostgreSQL DDL, as SQLAlchemy emits it for Airflow 3.3.2's migrations: `SERIAL` ids (an
-- integer sequence `<table>_id_seq` owned by the column), `timestamp with time zone` for every
-- timestamp, `jsonb` for dag_run's JSON columns. Names are unqualified: the connection's
-- `search_path` puts them in `[database] sql_alchemy_schema` when that is set. Indexes come
-- before the tables whose foreign keys need them (asset_active references asset's unique
-- (name, uri) index).

-- Key-only stand-ins for the tables dag_run's foreign keys name: PostgreSQL refuses a
-- foreign key to a missing table at CREATE time. Airflow's dag_version.id is a uuid.
CREATE TABLE log_template (id INTEGER NOT NULL, CONSTRAINT log_template_pkey PRIMARY KEY (id));

CREATE TABLE backfill (id INTEGER NOT NULL, CONSTRAINT backfill_pkey PRIMARY KEY (id));

CREATE TABLE dag_version (id UUID NOT NULL, CONSTRAINT dag_version_pkey PRIMARY KEY (id));

CREATE TABLE dag_run (
	id SERIAL NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	queued_at TIMESTAMP WITH TIME ZONE, 
	logical_date TIMESTAMP WITH TIME ZONE, 
	start_date TIMESTAMP WITH TIME ZONE, 
	end_date TIMESTAMP WITH TIME ZONE, 
	state VARCHAR(50), 
	run_id VARCHAR(250) NOT NULL, 
	creating_job_id INTEGER, 
	run_type VARCHAR(50) NOT NULL, 
	triggered_by VARCHAR(50), 
	triggering_user_name VARCHAR(512), 
	conf JSONB, 
	data_interval_start TIMESTAMP WITH TIME ZONE, 
	data_interval_end TIMESTAMP WITH TIME ZONE, 
	run_after TIMESTAMP WITH TIME ZONE NOT NULL, 
	last_scheduling_decision TIMESTAMP WITH TIME ZONE, 
	log_template_id INTEGER, 
	created_at TIMESTAMP WITH TIME ZONE, 
	updated_at TIMESTAMP WITH TIME ZONE, 
	clear_number INTEGER DEFAULT 0 NOT NULL, 
	backfill_id INTEGER, 
	bundle_version VARCHAR(250), 
	scheduled_by_job_id INTEGER, 
	context_carrier JSONB, 
	span_status VARCHAR(250) DEFAULT 'not_started' NOT NULL, 
	created_dag_version_id UUID, 
	partition_key VARCHAR(250), 
	partition_date TIMESTAMP WITH TIME ZONE, 
	CONSTRAINT dag_run_pkey PRIMARY KEY (id), 
	CONSTRAINT dag_run_dag_id_run_id_key UNIQUE (dag_id, run_id), 
	CONSTRAINT dag_run_dag_id_logical_date_key UNIQUE (dag_id, logical_date), 
	CONSTRAINT task_instance_log_template_id_fkey FOREIGN KEY(log_template_id) REFERENCES log_template (id), 
	CONSTRAINT dag_run_backfill_id_fkey FOREIGN KEY(backfill_id) REFERENCES backfill (id), 
	CONSTRAINT created_dag_version_id_fkey FOREIGN KEY(created_dag_version_id) REFERENCES dag_version (id) ON DELETE SET NULL
);

CREATE INDEX idx_dag_run_dag_id ON dag_run (dag_id);

CREATE INDEX idx_dag_run_queued_dags ON dag_run (state, dag_id) WHERE state = 'queued';

CREATE INDEX idx_dag_run_created_dag_version_id ON dag_run (created_dag_version_id);

CREATE INDEX dag_id_state ON dag_run (dag_id, state);

CREATE INDEX idx_dag_run_running_dags ON dag_run (state, dag_id) WHERE state = 'running';

CREATE INDEX idx_dag_run_run_after ON dag_run (run_after);

CREATE TABLE asset (
	id SERIAL NOT NULL, 
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	"group" VARCHAR(1500) NOT NULL, 
	extra JSON NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT asset_pkey PRIMARY KEY (id)
);

CREATE UNIQUE INDEX idx_asset_name_uri_unique ON asset (name, uri);

CREATE TABLE asset_active (
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	CONSTRAINT asset_active_pkey PRIMARY KEY (name, uri), 
	CONSTRAINT asset_active_asset_name_uri_fkey FOREIGN KEY(name, uri) REFERENCES asset (name, uri) ON DELETE CASCADE
);

CREATE UNIQUE INDEX idx_asset_active_uri_unique ON asset_active (uri);

CREATE UNIQUE INDEX idx_asset_active_name_unique ON asset_active (name);

-- task_instance's foreign keys name `trigger` too; a key-only stand-in, like the others.
CREATE TABLE trigger (id INTEGER NOT NULL, CONSTRAINT trigger_pkey PRIMARY KEY (id));

CREATE TABLE task_instance (
	id UUID NOT NULL, 
	task_id VARCHAR(250) NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	run_id VARCHAR(250) NOT NULL, 
	map_index INTEGER DEFAULT -1 NOT NULL, 
	start_date TIMESTAMP WITH TIME ZONE, 
	end_date TIMESTAMP WITH TIME ZONE, 
	duration FLOAT, 
	state VARCHAR(20), 
	try_number INTEGER NOT NULL, 
	max_tries INTEGER DEFAULT -1 NOT NULL, 
	hostname VARCHAR(1000), 
	unixname VARCHAR(1000), 
	pool VARCHAR(256) NOT NULL, 
	pool_slots INTEGER NOT NULL, 
	queue VARCHAR(256), 
	priority_weight INTEGER, 
	operator VARCHAR(1000), 
	custom_operator_name VARCHAR(1000), 
	queued_dttm TIMESTAMP WITH TIME ZONE, 
	scheduled_dttm TIMESTAMP WITH TIME ZONE, 
	queued_by_job_id INTEGER, 
	last_heartbeat_at TIMESTAMP WITH TIME ZONE, 
	pid INTEGER, 
	executor VARCHAR(1000), 
	executor_config BYTEA, 
	updated_at TIMESTAMP WITH TIME ZONE, 
	rendered_map_index VARCHAR(250), 
	context_carrier JSONB, 
	span_status VARCHAR(250) DEFAULT 'not_started' NOT NULL, 
	external_executor_id TEXT, 
	trigger_id INTEGER, 
	trigger_timeout TIMESTAMP WITH TIME ZONE, 
	next_method VARCHAR(1000), 
	next_kwargs JSONB, 
	task_display_name VARCHAR(2000), 
	dag_version_id UUID, 
	retry_delay_override FLOAT, 
	retry_reason VARCHAR(500), 
	CONSTRAINT task_instance_pkey PRIMARY KEY (id), 
	CONSTRAINT task_instance_composite_key UNIQUE (dag_id, task_id, run_id, map_index), 
	CONSTRAINT task_instance_trigger_id_fkey FOREIGN KEY(trigger_id) REFERENCES trigger (id) ON DELETE CASCADE, 
	CONSTRAINT task_instance_dag_run_fkey FOREIGN KEY(dag_id, run_id) REFERENCES dag_run (dag_id, run_id) ON DELETE CASCADE, 
	CONSTRAINT task_instance_dag_version_id_fkey FOREIGN KEY(dag_version_id) REFERENCES dag_version (id) ON DELETE RESTRICT
);

CREATE INDEX ti_state ON task_instance (state);

CREATE INDEX ti_dag_run ON task_instance (dag_id, run_id);

CREATE INDEX ti_trigger_id ON task_instance (trigger_id);

CREATE INDEX ti_pool ON task_instance (pool, state, priority_weight);

CREATE INDEX ti_state_lkp ON task_instance (dag_id, task_id, run_id, state);

CREATE INDEX ti_dag_version_id ON task_instance (dag_version_id);

CREATE INDEX ti_heartbeat ON task_instance (last_heartbeat_at);

CREATE INDEX ti_dag_state ON task_instance (dag_id, state);

CREATE TABLE task_state_store (
	id SERIAL NOT NULL, 
	dag_run_id INTEGER NOT NULL, 
	task_id VARCHAR(250) NOT NULL, 
	map_index INTEGER DEFAULT -1 NOT NULL, 
	"key" VARCHAR(512) NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	run_id VARCHAR(250) NOT NULL, 
	value TEXT NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	expires_at TIMESTAMP WITH TIME ZONE, 
	CONSTRAINT task_state_store_pkey PRIMARY KEY (id), 
	CONSTRAINT task_state_store_uq UNIQUE (dag_run_id, task_id, map_index, "key"), 
	CONSTRAINT task_state_store_dag_run_fkey FOREIGN KEY(dag_run_id) REFERENCES dag_run (id) ON DELETE CASCADE
);

CREATE INDEX idx_task_state_store_lookup ON task_state_store (dag_id, run_id, task_id, map_index);

CREATE INDEX idx_task_state_store_expires_at ON task_state_store (expires_at);

CREATE TABLE asset_state_store (
	asset_id INTEGER NOT NULL, 
	"key" VARCHAR(512) NOT NULL, 
	value TEXT NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	last_updated_by_kind VARCHAR(16), 
	last_updated_by_dag_id VARCHAR(250), 
	last_updated_by_run_id VARCHAR(250), 
	last_updated_by_task_id VARCHAR(250), 
	last_updated_by_map_index INTEGER, 
	CONSTRAINT asset_state_store_pkey PRIMARY KEY (asset_id, "key"), 
	CONSTRAINT asset_state_store_asset_fkey FOREIGN KEY(asset_id) REFERENCES asset (id) ON DELETE CASCADE
);

CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- The sandbox's marker: present only in databases made by `state-store sandbox create`.
CREATE TABLE state_store_sandbox (created_at TIMESTAMP WITH TIME ZONE NOT NULL);
