return read_source(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
