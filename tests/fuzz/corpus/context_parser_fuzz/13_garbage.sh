A='x'B
hello world
1A='x'
