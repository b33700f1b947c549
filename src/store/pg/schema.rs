// @generated automatically by Diesel CLI.

diesel::table! {
    fanout_jobs (id) {
        id -> Int8,
        kind -> Text,
        author_id -> Int8,
        post_id -> Nullable<Int8>,
        follower_id -> Nullable<Int8>,
        checkpoint -> Int8,
        attempts -> Int4,
        lease_until -> Timestamptz,
        last_error -> Nullable<Text>,
        dead -> Bool,
        created_at_ms -> Int8,
        lease -> Int8,
        epoch -> Nullable<Int8>,
        instance -> Nullable<Int8>,
        task_id -> Nullable<Int8>,
        targets -> Nullable<Array<Int8>>,
    }
}

diesel::table! {
    import_chunks (task_id, n) {
        task_id -> Int8,
        n -> Int8,
        ids -> Array<Int8>,
    }
}

diesel::table! {
    instances (id) {
        id -> Int8,
        seen_at -> Timestamptz,
    }
}

diesel::table! {
    blocks (blocker_id, blocked_id) {
        blocker_id -> Int8,
        blocked_id -> Int8,
        created_at_ms -> Int8,
    }
}

diesel::table! {
    follows (follower_id, followee_id) {
        follower_id -> Int8,
        followee_id -> Int8,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    mutes (muter_id, muted_id) {
        muter_id -> Int8,
        muted_id -> Int8,
        created_at_ms -> Int8,
    }
}

diesel::table! {
    posts (id) {
        id -> Int8,
        author_id -> Int8,
        body -> Text,
        created_at_ms -> Int8,
        deleted_at -> Nullable<Timestamptz>,
        pulled -> Bool,
        meta -> Nullable<Text>,
    }
}

diesel::table! {
    publish_keys (author_id, key) {
        author_id -> Int8,
        key -> Text,
        post_id -> Int8,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    settings (id) {
        id -> Int2,
        big_v_threshold -> Int8,
        big_v_demote_threshold -> Int8,
        active_window_secs -> Int8,
        inbox_max_len -> Int8,
        outbox_max_len -> Int8,
        updated_at -> Timestamptz,
        inbox_idle_ttl_secs -> Int8,
        max_follows -> Int8,
        max_fanout_backlog -> Int8,
        home_includes_own_posts -> Bool,
        follow_copy_limit -> Int8,
    }
}

diesel::table! {
    tasks (id) {
        id -> Int8,
        kind -> Text,
        user_id -> Int8,
        state -> Text,
        total -> Int8,
        done -> Int8,
        skipped -> Int8,
        error -> Nullable<Text>,
        targets -> Nullable<Array<Int8>>,
        created_at -> Timestamptz,
        finished_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    users (id) {
        id -> Int8,
        username -> Text,
        follower_count -> Int8,
        following_count -> Int8,
        big_v -> Bool,
        created_at -> Timestamptz,
        follow_seq -> Int8,
        big_v_epoch -> Int8,
        status -> Text,
        post_count -> Int8,
    }
}

diesel::joinable!(import_chunks -> tasks (task_id));
diesel::joinable!(posts -> users (author_id));

diesel::allow_tables_to_appear_in_same_query!(
    blocks,
    import_chunks,
    instances,
    fanout_jobs,
    follows,
    mutes,
    posts,
    publish_keys,
    settings,
    tasks,
    users,
);
