A=''
B='it'\''s'
